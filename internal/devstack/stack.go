// Package devstack runs the whole of owed on one machine for `owedctl dev`
// (make run): a throwaway PostgreSQL in a local folder, a queue server (the
// emulator, or with --queue a JetStream server or the local SQS server), the
// sandbox provider, the sweeper, a pool of workers and a built-in
// scheduler standing in for the hosted cron, with a seeded workload and a
// live status panel.
//
// It owns every process it starts and must never leave one running. Every
// child, PostgreSQL's postmaster included, is started through internal/launch:
// each runs in its own process group, so a terminal's Ctrl-C reaches owedctl
// alone, which then stops the children in order (scheduler, workers,
// sweeper, sandbox, queue, PostgreSQL); and each is killed by the kernel if
// owedctl dies without stopping them. It never touches a database it did
// not create beyond migrating it and seeding it through the public API and
// the documented owed_items table.
//
// The files: config.go (Config and its defaults, Go constants only),
// stack.go (the lifecycle), children.go (the services' processes),
// queues.go (each backend's queue server, its provisioning and the settings
// the services get), postgres.go (the cluster), standby.go (a drill's
// standby, crash and failover), folder.go (Dir and
// --fresh), secrets.go (this run's secrets and the env file that holds
// them), output.go and status.go (the start-up line, the first screen, the
// panel), seed.go and scheduler.go (the workload and the cron), control.go
// (Tuning and the controls only a fault drill uses), apiclient.go (the
// stack's HTTP APIs as a client with a token calls them).
package devstack

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/lib/pq" // the postgres driver

	"github.com/owedhq/owed/internal/launch"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/emulator"
)

// Stack is one running development system. Start it, Wait for the end, Stop
// it; Stop is safe to call twice or before Start.
type Stack struct {
	cfg     Config
	ep      Endpoints
	started time.Time
	resumed bool

	cluster *cluster
	appDB   *sql.DB
	ledger  *ledger.Reads
	queue   queue.Queue
	sandbox *sandbox.Client
	// queueVars are the queue settings every sweeper and worker gets, and
	// the env file exports.
	queueVars map[string]string
	// procMu guards procs, which a restart changes while the stack runs.
	procMu sync.Mutex
	procs  []*launch.Process
	// queueFaults are the emulator faults a drill set last, applied again
	// after the emulator restarts (it starts with none).
	queueFaultsMu sync.Mutex
	queueFaults   *emulator.Faults
	// releasePorts frees the ports the stack reserved for itself.
	releasePorts func()
	sched        *scheduler
	seeder       *seeder
	rate         pace.Rate
	// panelHeight is how many lines the last panel drew, so the next one
	// can move back over them; only the panel goroutine uses it.
	panelHeight int
	// inProgress says the start-up line is open.
	inProgress bool
	// meter turns the sandbox's counter into sends per minute for the panel
	// and, once the panel stopped, the final reading.
	meter rateMeter

	// cancel stops the background goroutines (scheduler, seeder, panel).
	cancel context.CancelFunc
	bg     sync.WaitGroup
	// died is closed when a child exits on its own; diedErr says which.
	died     chan struct{}
	diedOnce sync.Once
	diedErr  error

	stopOnce sync.Once
	stopErr  error
}

// New validates cfg and returns a Stack that has not started.
func New(cfg Config) (*Stack, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, err
	}
	rate, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Stack{cfg: cfg, rate: rate, died: make(chan struct{})}, nil
}

// Endpoints returns the URLs and secrets of the started stack.
func (s *Stack) Endpoints() Endpoints { return s.ep }

// Seeded returns what the seeder scheduled so far.
func (s *Stack) Seeded() Seeded {
	if s.seeder == nil {
		return Seeded{}
	}
	return s.seeder.snapshot()
}

// Start brings the system up: checks the binaries and ports, starts or
// reuses PostgreSQL, migrates, starts the children and waits for their
// health, creates the tokens, seeds, and starts the scheduler and the panel.
// On error everything already started is stopped.
func (s *Stack) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			s.endProgress("failed")
			s.Stop()
		}
	}()
	s.started = time.Now()
	bins, err := s.binaries()
	if err != nil {
		return err
	}
	if s.cfg.SweeperMetricsPort == 0 {
		ports, release, err := ReservePorts(1)
		if err != nil {
			return err
		}
		s.cfg.SweeperMetricsPort, s.releasePorts = ports[0], release
	}
	if err := s.cfg.checkPorts(); err != nil {
		return err
	}
	if err := s.prepareDir(ctx); err != nil {
		return err
	}
	s.printMode()
	urls, err := s.database(ctx)
	if err != nil {
		return err
	}
	if err := s.migrate(ctx, urls.owner); err != nil {
		return err
	}
	if s.appDB, err = sql.Open("postgres", urls.app); err != nil {
		return fmt.Errorf("open the application database: %w", err)
	}
	s.ledger = ledger.New(s.appDB, nil).Reads
	if err := s.startChildren(ctx, bins, urls); err != nil {
		return err
	}
	if s.ep.TenantToken, err = createToken(ctx, urls.admin); err != nil {
		return fmt.Errorf("create the %s tenant token: %w", Tenant, err)
	}
	if err := s.writeEnvFile(); err != nil {
		return err
	}
	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.seeder = newSeeder(s.ep.API, s.ep.TenantToken, s.appDB)
	if !s.cfg.NoSeed {
		if err := s.seeder.seedInitial(ctx); err != nil {
			return fmt.Errorf("seed the workload: %w", err)
		}
		s.progress("seeded")
		s.goBackground(func() { s.seeder.stream(bg) })
	}
	s.sched = newScheduler(s.ep.SweeperURLs, s.ep.CronSecret, s.cfg.Tick, filepath.Join(s.logDir(), "scheduler.log"))
	s.goBackground(func() { s.sched.run(bg) })
	s.endProgress(fmt.Sprintf("ready in %.1fs", time.Since(s.started).Seconds()))
	s.printIntro()
	s.goBackground(func() { s.panel(bg) })
	return nil
}

func (s *Stack) goBackground(fn func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn()
	}()
}

// Wait blocks until ctx is cancelled, the configured duration has passed, or
// a child exits on its own (an error naming it and its log).
func (s *Stack) Wait(ctx context.Context) error {
	var deadline <-chan time.Time
	if s.cfg.Duration > 0 {
		t := time.NewTimer(s.cfg.Duration - time.Since(s.started))
		defer t.Stop()
		deadline = t.C
	}
	select {
	case <-ctx.Done():
		return nil
	case <-deadline:
		return nil
	case <-s.died:
		return s.diedErr
	}
}

// Stop stops everything Start started, in order: the scheduler, seeder and
// panel, then the children from the last started (workers) to the first
// (queue), then PostgreSQL. It returns the first failure but always tries
// every step.
func (s *Stack) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(nil) })
	return s.stopErr
}

func (s *Stack) stop(force <-chan struct{}) error {
	s.stopBackground()
	var errs []error
	s.procMu.Lock()
	procs := s.procs
	s.procMu.Unlock()
	// Children stop in reverse start order, and the workers, which start
	// together, stop together: a pool of workers each taking its full
	// grace period one after another would make Ctrl-C slow.
	for i := len(procs); i > 0; {
		j := i - 1
		for j > 0 && isWorker(procs[j-1]) && isWorker(procs[i-1]) {
			j--
		}
		if err := launch.StopAll(procs[j:i], stopTimeout, force); err != nil {
			errs = append(errs, err)
		}
		i = j
	}
	if s.appDB != nil {
		s.appDB.Close()
	}
	if s.queue != nil {
		s.queue.Close()
	}
	if s.cluster != nil {
		if err := s.cluster.stop(force); err != nil {
			errs = append(errs, err)
		}
	}
	if s.releasePorts != nil {
		s.releasePorts()
	}
	return errors.Join(errs...)
}

// isWorker tells the worker processes, which stop together, by their name.
func isWorker(p *launch.Process) bool { return strings.HasPrefix(p.Name(), workerPrefix) }

// stopBackground stops the scheduler, the seeder and the panel and waits for
// them; it is safe to call more than once.
func (s *Stack) stopBackground() {
	if s.cancel != nil {
		s.cancel()
	}
	s.bg.Wait()
}

// Run starts the stack, waits for Ctrl-C, SIGTERM, the configured duration
// or a child's death, and stops it. A second Ctrl-C while stopping skips the
// grace periods (SIGKILL, PostgreSQL included) but still leaves nothing
// running: the signal is caught here, not left to kill owedctl. Were owedctl
// killed all the same, the kernel would kill its children (see
// internal/launch).
func (s *Stack) Run(ctx context.Context) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	force := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
			return
		}
		select {
		case <-sigs:
			close(force)
		case <-ctx.Done():
		}
	}()

	if err := s.Start(ctx); err != nil {
		return err
	}
	waitErr := s.Wait(ctx)
	s.stopBackground()
	s.endPanel()
	fmt.Fprintln(s.cfg.Out, "stopping: scheduler, workers, sweeper, sandbox, queue, postgres …")
	s.stopOnce.Do(func() { s.stopErr = s.stop(force) })
	if s.stopErr == nil {
		fmt.Fprintln(s.cfg.Out, "stopped; nothing left running. `make run` resumes this ledger, `make run ARGS=--fresh` starts over.")
	}
	return errors.Join(waitErr, s.stopErr)
}

// childDied records the first child that exited on its own and wakes Wait.
func (s *Stack) childDied(err error) {
	s.diedOnce.Do(func() {
		s.diedErr = err
		close(s.died)
	})
}
