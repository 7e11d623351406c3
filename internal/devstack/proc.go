package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue"
)

// binaries are the programs the stack runs, next to owedctl.
type binaries struct{ owedctl, sweeper, worker string }

// binaries finds owedctl, sweeper and worker in the bin folder, or says in
// one line how to build them.
func (s *Stack) binaries() (binaries, error) {
	b := binaries{
		owedctl: filepath.Join(s.cfg.BinDir, "owedctl"),
		sweeper: filepath.Join(s.cfg.BinDir, "sweeper"),
		worker:  filepath.Join(s.cfg.BinDir, "worker"),
	}
	for _, p := range []string{b.owedctl, b.sweeper, b.worker} {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return b, fmt.Errorf("%s is missing: run `make build` (or `make run`, which builds first) so owedctl, sweeper and worker sit in one folder", p)
		}
	}
	return b, nil
}

// childEnv is this process's environment without any OWED_ variable, so a
// variable exported for another purpose never reconfigures the stack, plus
// the child's own settings.
func childEnv(vars map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OWED_") {
			env = append(env, kv)
		}
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// startChildren starts the queue emulator, the sandbox, the sweepers and the
// workers, in that order (each needs the ones before it), and waits for each
// to answer /healthz before starting the next.
func (s *Stack) startChildren(ctx context.Context, b binaries, ownerURL, appURL string) error {
	cfg := s.cfg
	s.ep = Endpoints{API: httpURL(cfg.SweeperPort), QueueURL: httpURL(cfg.QueuePort), SandboxURL: httpURL(cfg.SandboxPort),
		QueueToken: secret(16), CronSecret: secret(16), ServiceToken: secret(16), AppURL: appURL, WebhookSecret: webhookSecret()}
	queueVars := map[string]string{"OWED_QUEUE_URL": s.ep.QueueURL, "OWED_QUEUE_TOKEN": s.ep.QueueToken}

	children := []childSpec{
		{"queue", b.owedctl, []string{"queue", "serve"}, map[string]string{
			"OWED_QUEUE_ADDR": addr(cfg.QueuePort), "OWED_QUEUE_TOKEN": s.ep.QueueToken,
			"OWED_QUEUE_DATABASE_URL": ownerURL}, cfg.QueuePort},
		{"sandbox", b.owedctl, []string{"provider", "serve", "--addr", addr(cfg.SandboxPort), "--rate", cfg.Rate,
			"--permanent-recipient", PermanentRecipient}, map[string]string{"OWED_SANDBOX_SECRET": s.ep.WebhookSecret}, cfg.SandboxPort},
	}
	sweeperPorts := []int{cfg.SweeperPort}
	if cfg.SecondSweeperPort != 0 {
		sweeperPorts = append(sweeperPorts, cfg.SecondSweeperPort)
	}
	for i, port := range sweeperPorts {
		// The first sweeper keeps the plain name its log has always had.
		name := "sweeper"
		if i > 0 {
			name = "sweeper-" + strconv.Itoa(i+1)
		}
		children = append(children, childSpec{name, b.sweeper, nil, merge(queueVars, cfg.SweeperEnv, map[string]string{
			"OWED_DATABASE_URL": appURL, "OWED_LISTEN_ADDR": addr(port),
			"OWED_CRON_SECRET": s.ep.CronSecret, "OWED_API_TOKEN": s.ep.ServiceToken}), port})
		s.ep.SweeperURLs = append(s.ep.SweeperURLs, httpURL(port))
	}
	for i, port := range cfg.WorkerPorts {
		children = append(children, childSpec{"worker-" + strconv.Itoa(i+1), b.worker, nil, merge(queueVars, cfg.WorkerEnv, map[string]string{
			"OWED_DATABASE_URL": appURL, "OWED_LISTEN_ADDR": addr(port), "OWED_PROVIDER_RATE": cfg.Rate,
			"OWED_PROVIDER": "sandbox", "OWED_SANDBOX_URL": s.ep.SandboxURL, "OWED_SANDBOX_SECRET": s.ep.WebhookSecret,
			"OWED_WORKER_CONCURRENCY": strconv.Itoa(cfg.WorkerConcurrency),
			"OWED_SHUTDOWN_TIMEOUT":   workerShutdownTimeout.String()}), port})
		s.ep.WorkerURLs = append(s.ep.WorkerURLs, httpURL(port))
	}
	for _, c := range children {
		p, err := s.launch(ctx, c, b.worker, os.O_TRUNC)
		if err != nil {
			return err
		}
		s.procMu.Lock()
		s.procs = append(s.procs, p)
		s.procMu.Unlock()
		s.progress(c.name)
	}
	var err error
	if s.queue, err = queue.New(queue.Config{URL: s.ep.QueueURL, Token: s.ep.QueueToken, Name: queue.DefaultQueueName}); err != nil {
		return fmt.Errorf("queue client: %w", err)
	}
	s.sandbox = sandbox.NewClient(s.ep.SandboxURL)
	return nil
}

// childSpec is how a child is started, kept so a drill can start it again.
type childSpec struct {
	name string
	path string
	args []string
	vars map[string]string
	port int
}

// launch starts one child, waits for its health and watches for its death.
// logFlag is os.O_TRUNC for a first start and os.O_APPEND for a restart, so
// a restarted child's log keeps what its predecessor wrote.
func (s *Stack) launch(ctx context.Context, c childSpec, workerPath string, logFlag int) (*proc, error) {
	p, err := startProc(c.name, c.path, c.args, childEnv(c.vars), filepath.Join(s.logDir(), c.name+".log"), logFlag)
	if err != nil {
		return nil, err
	}
	p.spec = c
	p.worker = c.path == workerPath
	if err := p.waitHealthy(ctx, httpURL(c.port)+"/healthz", healthTimeout); err != nil {
		// A child that never became healthy must not outlive the start.
		p.stop(0, nil)
		return nil, err
	}
	go func() {
		<-p.done
		if !p.stopping.Load() {
			s.childDied(fmt.Errorf("%s exited on its own (%v); see %s", p.name, p.err, p.log))
		}
	}()
	return p, nil
}

// merge returns the union of maps; a later map wins on a shared key.
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// proc is one child process.
type proc struct {
	name string
	log  string
	// worker marks the worker processes, which stop together.
	worker bool
	// spec is how the process was started, for a restart.
	spec childSpec
	cmd  *exec.Cmd
	// done is closed once the process has exited and err is set.
	done chan struct{}
	err  error
	// stopping is set before Stop signals the process, so its exit is not
	// reported as a death.
	stopping atomic.Bool
}

// startProc starts path in its own process group, so a Ctrl-C meant for
// owedctl does not reach it and a stop can signal it with anything it
// forked, with stdout and stderr in logPath (truncated by a first start,
// as the logs are this run's; appended to by a restart).
func startProc(name, path string, args, env []string, logPath string, logFlag int) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|logFlag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: open its log: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// pid is the process id, which is also its process group id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// waitHealthy polls url until it answers 200, the process exits (an error
// carrying the end of its log), or timeout passes.
func (p *proc) waitHealthy(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during start-up (%v); end of %s:\n%s", p.name, p.err, p.log, tail(p.log, 8))
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer %s within %s; see %s", p.name, url, timeout, p.log)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM to the process group and waits up to timeout (or until
// force closes) before SIGKILL. A process that already exited is fine.
func (p *proc) stop(timeout time.Duration, force <-chan struct{}) error {
	p.stopping.Store(true)
	select {
	case <-p.done:
		return nil
	default:
	}
	pgid := p.pid()
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-force:
	}
	// Whatever the child forked dies with it, even if the child itself
	// exited cleanly.
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
	return nil
}

// tail returns the last n lines of the file at path, indented.
func tail(path string, n int) string {
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
