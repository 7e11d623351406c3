// Package testenv decides what a test does when this machine lacks a piece
// it needs from outside Go: a program (promtool, the local SQS server, the
// PostgreSQL server binaries) or a harness variable. Run alone (`go test
// ./internal/queue/sqs`), the test skips, naming the piece and the command
// that installs it, so a developer without it can still run the rest. Under
// `make test`, which claims to run every suite, scripts/test.sh sets
// RequireAllVariable and the same test fails instead: a suite never goes
// missing from a run that looks green.
//
// A skip that is not about a missing piece (testing.Short, a hosted queue
// nobody configured, a case a backend cannot express) is not this package's:
// those stay plain t.Skip calls, listed in the README's "What make test
// needs".
//
// It is imported only by tests.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// How to get each piece scripts/install-deps.sh installs (the one installer,
// which make test runs), for Missing's messages.
const (
	InstallPostgres = "run scripts/install-deps.sh as root, or: sudo apt-get install postgresql"
	InstallPromtool = "run scripts/install-deps.sh as root, or: sudo apt-get install --no-install-recommends prometheus"
	InstallSQS      = "run scripts/install-deps.sh as root, or: sudo scripts/install-sqs.sh " +
		"(without root: OWED_SQS_PREFIX=$HOME/.local scripts/install-sqs.sh, with ~/.local/bin on PATH)"
)

// RequireAllVariable, set to 1 (scripts/test.sh does), turns every Missing
// into a failure.
const RequireAllVariable = "OWED_TEST_REQUIRE_ALL"

// RequireAll reports whether this run must have every piece.
func RequireAll() bool { return os.Getenv(RequireAllVariable) == "1" }

// Missing ends t for want of what, saying how to get it (install, a
// command): a skip, or under RequireAll a failure.
func Missing(t testing.TB, what, install string) {
	t.Helper()
	if RequireAll() {
		t.Fatalf("%s is missing and %s=1 (make test) runs every suite: %s", what, RequireAllVariable, install)
	} else {
		t.Skipf("skipping: %s is missing: %s", what, install)
	}
}

// LookPath returns the path of the program name, or ends t through Missing.
func LookPath(t testing.TB, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, name+" (not on PATH)", install)
	}
	return p
}
