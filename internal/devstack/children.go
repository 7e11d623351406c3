package devstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/owedhq/owed/internal/launch"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/service"
)

// workerPrefix starts every worker's name: worker-1, worker-2, ….
const workerPrefix = "worker-"

// binaries are the programs the stack runs, next to owedctl.
type binaries struct{ owedctl, sweeper, worker string }

// binaries finds owedctl, sweeper and worker in the bin folder (and, for
// --queue sqs, the local SQS server), or says in one line how to get them.
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
	if s.cfg.Queue == backends.SQS {
		if _, err := FindSQSServer(); err != nil {
			return b, err
		}
	}
	return b, nil
}

// startChildren starts the queue server (and provisions it), the sandbox,
// the sweepers and the workers, in that order (each needs the ones before
// it), and waits for each to be ready before starting the next.
func (s *Stack) startChildren(ctx context.Context, b binaries, urls roleURLs) error {
	cfg := s.cfg
	s.ep = Endpoints{API: httpURL(cfg.SweeperPort), Metrics: httpURL(cfg.SweeperMetricsPort), QueueURL: httpURL(cfg.QueuePort),
		SandboxURL: httpURL(cfg.SandboxPort), CronSecret: secret(16), ServiceToken: secret(16), ConsoleToken: secret(16), AppURL: urls.app,
		AdminURL: urls.admin, OperatorURL: urls.operator, WebhookSecret: webhookSecret()}
	if cfg.Queue == backends.JetStream {
		s.ep.QueueURL = s.natsURL()
	}
	if cfg.Queue == backends.REST {
		s.ep.QueueToken, s.ep.QueueFaultToken = secret(16), secret(16)
	}
	queueSpec, err := s.queueSpec(b, urls.queue)
	if err != nil {
		return err
	}
	if err := s.startChild(ctx, queueSpec); err != nil {
		return err
	}
	if s.queueVars, err = s.openQueue(ctx); err != nil {
		return err
	}
	queueVars := s.queueVars

	children := []launch.Spec{
		s.childSpec("sandbox", b.owedctl, []string{"provider", "serve", "--addr", addr(cfg.SandboxPort), "--rate", cfg.Rate,
			"--permanent-recipient", PermanentRecipient}, cfg.SandboxPort, map[string]string{"OWED_SANDBOX_SECRET": s.ep.WebhookSecret}),
	}
	sweeperPorts := []int{cfg.SweeperPort}
	if cfg.Tuning.SecondSweeperPort != 0 {
		sweeperPorts = append(sweeperPorts, cfg.Tuning.SecondSweeperPort)
	}
	for i, port := range sweeperPorts {
		// The first sweeper keeps the plain name its log has always had;
		// a second one's operator listener is on a port nobody reads.
		name, metrics := "sweeper", addr(cfg.SweeperMetricsPort)
		if i > 0 {
			name, metrics = "sweeper-"+strconv.Itoa(i+1), addr(0)
		}
		children = append(children, s.childSpec(name, b.sweeper, nil, port, queueVars, cfg.Tuning.SweeperEnv, s.roleVars(), map[string]string{
			"OWED_DATABASE_URL": urls.app, "OWED_LISTEN_ADDR": addr(port), "OWED_METRICS_ADDR": metrics,
			"OWED_CRON_SECRET": s.ep.CronSecret, "OWED_API_TOKEN": s.ep.ServiceToken, "OWED_PROVIDER_RATE": cfg.Rate,
			"OWED_CONSOLE_TOKEN": s.ep.ConsoleToken, "OWED_OPERATOR_DATABASE_URL": urls.operator}))
		s.ep.SweeperURLs = append(s.ep.SweeperURLs, httpURL(port))
	}
	for i, port := range cfg.WorkerPorts {
		children = append(children, s.childSpec(workerPrefix+strconv.Itoa(i+1), b.worker, nil, port, queueVars, cfg.Tuning.WorkerEnv, s.roleVars(), map[string]string{
			"OWED_DATABASE_URL": urls.app, "OWED_LISTEN_ADDR": addr(port), "OWED_PROVIDER_RATE": cfg.Rate,
			"OWED_PROVIDER": "sandbox", "OWED_SANDBOX_URL": s.ep.SandboxURL, "OWED_SANDBOX_SECRET": s.ep.WebhookSecret,
			"OWED_WORKER_CONCURRENCY": strconv.Itoa(cfg.Tuning.WorkerConcurrency),
			"OWED_SHUTDOWN_TIMEOUT":   workerShutdownTimeout.String()}))
		s.ep.WorkerURLs = append(s.ep.WorkerURLs, httpURL(port))
	}
	for _, spec := range children {
		if err := s.startChild(ctx, spec); err != nil {
			return err
		}
	}
	s.sandbox = sandbox.NewClient(s.ep.SandboxURL)
	return nil
}

// roleVars are the variables of every child that connects to the
// database: with cfg.DatabaseURL, one role (the tables' owner, since it
// migrates) serves everything, and the children run past the role check
// (service.CheckRole) and the durability check (service.CheckDurable: a
// developer's own server may run synchronous_commit = off), logging each
// problem. The stack's own cluster passes both.
func (s *Stack) roleVars() map[string]string {
	if s.cfg.DatabaseURL == "" {
		return nil
	}
	return map[string]string{service.InsecureRoleVariable: "true", service.AsyncCommitVariable: "true"}
}

// startChild starts one child, waits until it is ready and watches it.
func (s *Stack) startChild(ctx context.Context, spec launch.Spec) error {
	p, err := launch.Start(ctx, spec)
	if err != nil {
		return err
	}
	s.watch(p)
	s.procMu.Lock()
	s.procs = append(s.procs, p)
	s.procMu.Unlock()
	s.progress(spec.Name)
	return nil
}

// childSpec is how a child is started (and started again by a drill): its
// environment is this process's without any OWED_ variable, so a variable
// exported for another purpose never reconfigures the stack, plus vars; its
// log is Dir/logs/<name>.log; it is ready once it answers /healthz on port.
func (s *Stack) childSpec(name, path string, args []string, port int, vars ...map[string]string) launch.Spec {
	return launch.Spec{Name: name, Path: path, Args: args, Env: launch.Environ(vars...),
		Log: filepath.Join(s.logDir(), name+".log"), Ready: launch.Healthz(httpURL(port)), ReadyTimeout: healthTimeout}
}

// watch reports p's death, unless it was stopped or killed on purpose.
func (s *Stack) watch(p *launch.Process) {
	go func() {
		<-p.Done()
		if !p.StopRequested() {
			s.childDied(fmt.Errorf("%s exited on its own (%v); see %s", p.Name(), p.Err(), p.Log()))
		}
	}()
}
