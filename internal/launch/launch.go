// Package launch is owed's one process supervisor. The dev stack (`owedctl
// dev`), the fault drill and the benchmarks start every binary they run, and
// every PostgreSQL program, through it; nothing else in owed calls
// exec.Cmd.Start for a child that outlives a function call.
//
// Every child runs in its own process group, so a terminal's Ctrl-C reaches
// the parent alone (which then stops the children in its own order) and a
// stop or a kill -9 reaches whatever the child forked. Every child is also
// sent SIGKILL by the kernel the moment the parent dies (Linux's
// parent-death signal), so a parent killed with kill -9, or a `make run |
// tee log` ended with Ctrl-C, leaves nothing running. The package never
// forks from an arbitrary goroutine: see startLocked for why.
//
// A child is ready when its Spec.Ready probe says so; for owed's services
// the probe is Healthz, their /healthz. Stop sends SIGTERM to the group (or
// the Spec's own stop signal to the child alone) and SIGKILL after a grace
// period; StopAll stops many children at once.
package launch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultReadyTimeout bounds how long a child may take to become ready when
// its Spec names no timeout.
const DefaultReadyTimeout = 30 * time.Second

// readyPoll is how often Ready is asked.
const readyPoll = 100 * time.Millisecond

// Spec says how to start one child. A Process keeps it, so the child can be
// started again the same way.
type Spec struct {
	// Name names the child in errors ("worker-1").
	Name string
	Path string
	Args []string
	// Env is the child's whole environment; Environ builds it.
	Env []string
	// Dir is the child's working directory; the parent's when empty.
	Dir string
	// Credential, when set, runs the child as another user (PostgreSQL
	// refuses to run as root).
	Credential *syscall.Credential
	// Log receives the child's stdout and stderr. Start truncates it;
	// Restart appends, so the log keeps what the predecessor wrote.
	Log string
	// Ready, when set, is asked every 100 ms until it returns nil, the
	// child exits, or ReadyTimeout passes; Start returns only then. Owed's
	// services answer Healthz.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds the wait for Ready; DefaultReadyTimeout when zero.
	ReadyTimeout time.Duration
	// StopSignal, when set, is what Stop sends, to the child alone instead
	// of SIGTERM to its group: for a server that stops its own helpers in
	// order, as PostgreSQL's postmaster does on SIGINT (fast shutdown),
	// where a signal to every member would reach the helpers first.
	StopSignal syscall.Signal
}

// Process is one running (or exited) child.
type Process struct {
	spec Spec
	cmd  *exec.Cmd
	// done is closed once the child has exited and err is set.
	done chan struct{}
	err  error
	// stopping is set before Stop or Kill signals the child, so its exit
	// is not taken for a death.
	stopping atomic.Bool
}

// Start starts the child described by spec, truncating its log, and waits
// until it is ready. A child that exits or does not become ready is killed
// and Start returns an error naming its log (and, when it exited, the end of
// the log).
func Start(ctx context.Context, spec Spec) (*Process, error) {
	return start(ctx, spec, os.O_TRUNC)
}

// Restart starts p's child again from the same Spec, appending to its log,
// and waits until it is ready. p must have exited (after Kill or Stop).
func (p *Process) Restart(ctx context.Context) (*Process, error) {
	select {
	case <-p.done:
	default:
		return nil, fmt.Errorf("restart %s: it is still running; Kill or Stop it first", p.spec.Name)
	}
	return start(ctx, p.spec, os.O_APPEND)
}

func start(ctx context.Context, spec Spec, logFlag int) (*Process, error) {
	f, err := os.OpenFile(spec.Log, os.O_CREATE|os.O_WRONLY|logFlag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: open its log: %w", spec.Name, err)
	}
	// The child holds its own copy of the descriptor.
	defer f.Close()
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = spec.Env, spec.Dir, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: spec.Credential}
	if err := startLocked(cmd); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", spec.Name, spec.Path, err)
	}
	p := &Process{spec: spec, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(ctx); err != nil {
		// A child that never became ready must not outlive the start.
		p.Kill()
		return nil, err
	}
	return p, nil
}

// waitReady asks the Spec's Ready until it returns nil, the child exits or
// the timeout passes.
func (p *Process) waitReady(ctx context.Context) error {
	if p.spec.Ready == nil {
		return nil
	}
	timeout := cmp.Or(p.spec.ReadyTimeout, DefaultReadyTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		err := p.spec.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during start-up (%v); end of %s:\n%s", p.spec.Name, p.err, p.spec.Log, Tail(p.spec.Log, 8))
		case <-ctx.Done():
			return fmt.Errorf("%s was not ready within %s (%v); see %s", p.spec.Name, timeout, err, p.spec.Log)
		case <-tick.C:
		}
	}
}

// Name is the Spec's name.
func (p *Process) Name() string { return p.spec.Name }

// Log is the path of the child's log.
func (p *Process) Log() string { return p.spec.Log }

// Pid is the child's process id, which is also its process group's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the child has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the child exited (nil for status 0), once Done is closed.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// StopRequested reports whether Stop or Kill was called: an exit after it is
// not the child dying on its own.
func (p *Process) StopRequested() bool { return p.stopping.Load() }

// Kill sends SIGKILL to the child's process group, as kill -9 does, and
// waits for the child to exit. The child gets no chance to finish anything.
func (p *Process) Kill() error {
	p.stopping.Store(true)
	if err := syscall.Kill(-p.Pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill -9 %s: %w", p.spec.Name, err)
	}
	<-p.done
	return nil
}

// Stop asks the child to stop (SIGTERM to its group, or the Spec's
// StopSignal to the child alone), waits up to grace, or until force closes,
// and then sends SIGKILL to the group: whatever the child forked dies with
// it, even when the child itself exited cleanly. A child that had already
// exited is fine. The error says when the child outlived the grace period
// or exited with a failure; a kill asked for through force is no error.
func (p *Process) Stop(grace time.Duration, force <-chan struct{}) error {
	p.stopping.Store(true)
	select {
	case <-p.done:
		return nil
	default:
	}
	pid, target, sig := p.Pid(), -p.Pid(), syscall.SIGTERM
	if p.spec.StopSignal != 0 {
		target, sig = pid, p.spec.StopSignal
	}
	if err := syscall.Kill(target, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s: %w", p.spec.Name, err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	var outlived, forced bool
	select {
	case <-p.done:
	case <-t.C:
		outlived = true
	case <-force:
		forced = true
	}
	syscall.Kill(-pid, syscall.SIGKILL)
	<-p.done
	switch {
	case forced:
		return nil
	case outlived:
		return fmt.Errorf("%s did not stop within %s of %s and was killed; see %s", p.spec.Name, grace, sig, p.spec.Log)
	case p.err != nil:
		return fmt.Errorf("%s exited %v on %s; see %s", p.spec.Name, p.err, sig, p.spec.Log)
	}
	return nil
}

// StopAll stops every process at once (see Stop) and returns every failure.
func StopAll(ps []*Process, grace time.Duration, force <-chan struct{}) error {
	errc := make(chan error, len(ps))
	for _, p := range ps {
		go func() { errc <- p.Stop(grace, force) }()
	}
	var errs []error
	for range ps {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Output runs a short-lived program to completion under the same rules as
// a child (its own process group, SIGKILL if the parent dies) and returns
// its combined stdout and stderr. cmd's Stdout and Stderr are replaced.
func Output(cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := startLocked(cmd); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	return out.Bytes(), err
}

// Environ is this process's environment without any OWED_ variable, so a
// variable exported for another purpose never reconfigures a child, plus the
// union of vars (a later map wins on a shared key), sorted.
func Environ(vars ...map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OWED_") {
			env = append(env, kv)
		}
	}
	all := map[string]string{}
	for _, m := range vars {
		maps.Copy(all, m)
	}
	for _, k := range slices.Sorted(maps.Keys(all)) {
		env = append(env, k+"="+all[k])
	}
	return env
}

// Tail returns the last n lines of the file at path, indented: what an
// error shows of a child's log.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + string(bytes.Join(lines, []byte("\n  ")))
}
