package launch_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/devstack/devstacktest"
	"github.com/owedhq/owed/internal/launch"
)

// goneWithin bounds how long the kernel may take to end a child whose
// parent died; it is far above what it takes.
const goneWithin = time.Minute

// parentRole makes the test binary act as a parent that starts a child
// through launch, prints its pid and waits to be killed.
const parentRole = "LAUNCH_TEST_ROLE"

func TestMain(m *testing.M) {
	if os.Getenv(parentRole) == "parent" {
		p, err := launch.Start(context.Background(), launch.Spec{Name: "sleeper", Path: "/bin/sleep", Args: []string{"300"},
			Log: os.Getenv("LAUNCH_TEST_LOG")})
		if err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString(strconv.Itoa(p.Pid()) + "\n")
		select {}
	}
	os.Exit(m.Run())
}

// A child dies with its parent: kill -9 the parent and the child is gone,
// by the parent-death signal, with no Stop ever called.
func TestChildDiesWithParent(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), parentRole+"=parent", "LAUNCH_TEST_LOG="+filepath.Join(t.TempDir(), "sleeper.log"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("read the child's pid: %v", err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("the parent said %q", line)
	}
	if !devstacktest.Alive(child) {
		t.Fatalf("child %d is not running while its parent lives", child)
	}
	cmd.Process.Kill()
	cmd.Wait()
	devstacktest.WaitGone(t, []int{child}, goneWithin)
}

// Stop ends the child and everything it forked, since it signals the
// child's process group.
func TestStopEndsTheGroup(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "sh.log")
	p, err := launch.Start(context.Background(), launch.Spec{Name: "sh", Path: "/bin/sh",
		Args: []string{"-c", "sleep 300 & echo $!; wait"}, Log: log, Ready: func(context.Context) error {
			if b, _ := os.ReadFile(log); len(b) == 0 {
				return errors.New("no pid yet")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(log)
	grandchild, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("log %q", b)
	}
	// sh dies of the SIGTERM, which Stop reports.
	if err := p.Stop(10*time.Second, nil); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Errorf("Stop = %v, want an error saying sh was terminated", err)
	}
	if !p.StopRequested() {
		t.Error("StopRequested is false after Stop")
	}
	// The grandchild, orphaned, may stay a zombie of a PID 1 that does not
	// reap; Alive counts that as gone.
	devstacktest.WaitGone(t, []int{p.Pid(), grandchild}, goneWithin)
	if err := p.Stop(time.Second, nil); err != nil {
		t.Errorf("a second Stop = %v, want nil", err)
	}
}

// A child that exits during start-up fails Start with the end of its log.
func TestStartReportsAnEarlyExit(t *testing.T) {
	t.Parallel()
	_, err := launch.Start(context.Background(), launch.Spec{Name: "early", Path: "/bin/sh", Args: []string{"-c", "echo boom; exit 3"},
		Log: filepath.Join(t.TempDir(), "early.log"), Ready: func(context.Context) error { return errors.New("not yet") }})
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Start = %v, want an early exit quoting the log", err)
	}
}

// Kill and Restart: the new process appends to the log the old one wrote.
func TestKillAndRestart(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "echo.log")
	spec := launch.Spec{Name: "echo", Path: "/bin/sh", Args: []string{"-c", "echo started; exec sleep 300"}, Log: log}
	p, err := launch.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Restart(context.Background()); err == nil {
		t.Error("Restart of a running child succeeded")
	}
	waitStarted(t, log, 1)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	q, err := p.Restart(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Stop(0, nil)
	waitStarted(t, log, 2)
	if q.Pid() == p.Pid() || !devstacktest.Alive(q.Pid()) {
		t.Errorf("restarted pid %d (was %d) is not a new running process", q.Pid(), p.Pid())
	}
}

func TestEnvironDropsOwedVariables(t *testing.T) {
	t.Setenv("OWED_STRAY", "1")
	env := launch.Environ(map[string]string{"OWED_A": "1", "OWED_B": "1"}, map[string]string{"OWED_A": "2"})
	var owed []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "OWED_") {
			owed = append(owed, kv)
		}
	}
	if strings.Join(owed, " ") != "OWED_A=2 OWED_B=1" {
		t.Errorf("OWED_ variables %q, want OWED_A=2 OWED_B=1 only", owed)
	}
}

// waitStarted polls the children's log until it shows n starts, failing
// the test with what it last read when 30 s pass.
func waitStarted(t *testing.T, log string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(log)
		if strings.Count(string(b), "started") == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log shows %d starts after 30 s, want %d: %q", strings.Count(string(b), "started"), n, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
