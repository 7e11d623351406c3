// Package devstacktest holds what tests that run the real binaries share:
// a folder the postgres OS user can reach, the binaries built from this
// module, the process-table reads that prove nothing is left running, and a
// buffer several goroutines write to. It is imported only by tests.
package devstacktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TempDir returns a folder under /tmp that the postgres OS user can reach
// when the test runs as root (t.TempDir's parents may be closed to it); it
// is removed when the test ends.
func TempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// BuildBinaries builds owedctl, sweeper and worker from the module root into
// dir/bin and returns that folder. They are built without the race
// detector: the children need not be race builds, and race builds would
// slow a drill past its budget.
func BuildBinaries(t testing.TB, dir string) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	bin := filepath.Join(dir, "bin")
	cmd := exec.Command("go", "build", "-o", bin+"/", "./cmd/...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
