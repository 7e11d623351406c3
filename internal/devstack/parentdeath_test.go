package devstack

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/devstack/devstacktest"
	"github.com/owedhq/owed/internal/launch"
)

// TestChildrenDieWithOwedctl starts `owedctl dev` itself, kills it with
// SIGKILL, which gives it no chance to stop anything, and checks that every
// process it started is gone all the same: the services, PostgreSQL's
// postmaster and its backends. The kernel's parent-death signal ends the
// children (internal/launch), and the backends end when their postmaster
// does.
func TestChildrenDieWithOwedctl(t *testing.T) {
	if _, err := FindPostgres(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	tmp := devstacktest.TempDir(t, "owed-devstack-kill-")
	bin := devstacktest.BuildBinaries(t, tmp)
	ports := freePorts(t, 5)
	dir := filepath.Join(tmp, "dev")
	env := filepath.Join(dir, "env")
	p, err := launch.Start(context.Background(), launch.Spec{Name: "owedctl dev", Path: filepath.Join(bin, "owedctl"),
		Args: []string{"dev", "--dir", dir, "--no-seed", "--sweeper-port", strconv.Itoa(ports[0]), "--queue-port", strconv.Itoa(ports[1]),
			"--sandbox-port", strconv.Itoa(ports[2]), "--worker-ports", strconv.Itoa(ports[3]) + "," + strconv.Itoa(ports[4])},
		Env: launch.Environ(), Log: filepath.Join(tmp, "owedctl.log"), ReadyTimeout: 2 * time.Minute,
		// The env file is written once every child answered its health
		// check.
		Ready: func(context.Context) error {
			_, err := os.Stat(env)
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	children := devstacktest.Descendants(t, p.Pid())
	t.Cleanup(func() {
		// Only when the test failed is anything left to end.
		for _, pid := range children {
			if devstacktest.Alive(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	postmaster := pidFile(t, filepath.Join(dir, "pg", "data", "postmaster.pid"))
	// queue, sandbox, sweeper, two workers, the postmaster and its helpers.
	if len(children) < 7 || !slices.Contains(children, postmaster) {
		t.Fatalf("owedctl dev runs %v, want at least 7 processes with the postmaster %d among them", children, postmaster)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	devstacktest.WaitGone(t, children, time.Minute)
}

// pidFile reads the process id on the first line of path.
func pidFile(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(first)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}
