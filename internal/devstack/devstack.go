// Package devstack runs the whole of owed on one machine for `owedctl dev`
// (make run): a throwaway PostgreSQL in a local folder, the queue emulator,
// the sandbox provider, the sweeper, a pool of workers and a built-in
// scheduler standing in for the hosted cron, with a seeded workload and a
// live status panel.
//
// It owns every process it starts and must never leave one running: each
// child runs in its own process group so a terminal's Ctrl-C reaches owedctl
// alone, which then stops the children in order (scheduler, workers,
// sweeper, sandbox, queue, PostgreSQL). It never touches a database it did
// not create beyond migrating it and seeding it through the public API and
// the documented owed_items table.
package devstack

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	_ "github.com/lib/pq" // the postgres driver

	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/migrate"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/emulator"
)

// Defaults of Config.
const (
	// DefaultDir holds the cluster, the logs and the env file, relative to
	// the current directory (the repository when run by make).
	DefaultDir = ".owed/dev"
	// DefaultTick is the sweep interval of the built-in scheduler, as the
	// hosted cron calls /cron/sweep every minute.
	DefaultTick = time.Minute
	// MaterialiseEveryTicks makes /cron/materialise run every 15 ticks:
	// every 15 minutes at the default tick, as in production.
	MaterialiseEveryTicks = 15
	// DefaultRate is the sandbox's limit and the workers' shared pace.
	DefaultRate = sandbox.DefaultRate
	// Default ports, all on loopback.
	DefaultSweeperPort = 8080
	DefaultQueuePort   = 8181
	DefaultSandboxPort = 8282
	// PermanentRecipient is the sandbox's permanent-failure pattern: a
	// recipient containing it is refused with 422 and must end failed and
	// dead-lettered.
	PermanentRecipient = "bounce"
	// Tenant is the tenant the seeded workload belongs to.
	Tenant = "acme"
)

// DefaultWorkerPorts gives two workers, each with its own metrics port.
var DefaultWorkerPorts = []int{9091, 9092}

// Timeouts of the stack's own steps.
const (
	// healthTimeout bounds how long a child may take to answer /healthz.
	healthTimeout = 30 * time.Second
	// stopTimeout is how long a child gets after SIGTERM before SIGKILL. It
	// exceeds the workers' shutdownTimeout so a worker finishes its in-flight
	// sends rather than being killed mid-send.
	stopTimeout = 15 * time.Second
	// workerShutdownTimeout is passed to the workers as OWED_SHUTDOWN_TIMEOUT.
	workerShutdownTimeout = 10 * time.Second
	// workerConcurrency keeps a dev worker small; the pace, not the pool,
	// limits a 40/m provider.
	workerConcurrency = 4
)

// Config configures a Stack. Zero fields take the defaults above.
type Config struct {
	// Dir holds the cluster (Dir/pg), the logs (Dir/logs) and Dir/env.
	Dir string
	// BinDir holds owedctl, sweeper and worker; the folder of the running
	// executable when empty.
	BinDir string
	// DatabaseURL, when set, is an existing database used instead of a
	// local cluster, for migrating, the queue emulator and the services.
	DatabaseURL string
	// Fresh wipes Dir before starting; otherwise the ledger of the last run
	// is resumed.
	Fresh bool
	// Tick is the sweep interval; materialise runs every 15 ticks.
	Tick time.Duration
	// Rate is the sandbox's limit and the workers' pace, like "40/m".
	Rate string
	// Duration, when above zero, stops the stack after that long.
	Duration time.Duration
	// NoSeed starts the stack without the demo workload.
	NoSeed                              bool
	SweeperPort, QueuePort, SandboxPort int
	WorkerPorts                         []int
	// WorkerConcurrency is each worker's OWED_WORKER_CONCURRENCY; a small
	// pool (4) when zero, because the pace, not the pool, limits a 40/m
	// provider. A drill raises it to keep many sends in flight.
	WorkerConcurrency int
	// SecondSweeperPort, when set, runs a second sweeper process
	// ("sweeper-2") there. The scheduler calls both every tick, so their
	// sweeps overlap, which the sweeper's lease makes safe.
	SecondSweeperPort int
	// SweeperEnv and WorkerEnv add OWED_ settings to every sweeper and
	// worker: a drill shortens leases and timeouts so healing fits a short
	// run.
	SweeperEnv, WorkerEnv map[string]string
	// Out receives the first screen and the status panel; Terminal says it
	// is a terminal, so the panel is redrawn in place.
	Out      io.Writer
	Terminal bool
}

func (c *Config) applyDefaults() error {
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return fmt.Errorf("--dir %q: %w", c.Dir, err)
	}
	c.Dir = dir
	if c.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the bin folder from the running executable: %w", err)
		}
		c.BinDir = filepath.Dir(exe)
	}
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.Rate == "" {
		c.Rate = DefaultRate
	}
	if c.SweeperPort == 0 {
		c.SweeperPort = DefaultSweeperPort
	}
	if c.QueuePort == 0 {
		c.QueuePort = DefaultQueuePort
	}
	if c.SandboxPort == 0 {
		c.SandboxPort = DefaultSandboxPort
	}
	if len(c.WorkerPorts) == 0 {
		c.WorkerPorts = DefaultWorkerPorts
	}
	if c.WorkerConcurrency == 0 {
		c.WorkerConcurrency = workerConcurrency
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return nil
}

// validate names the flag behind the first unusable setting.
func (c Config) validate() error {
	if c.Tick < time.Second {
		return fmt.Errorf("--tick %s: must be at least 1s", c.Tick)
	}
	if _, err := pace.ParseRate(c.Rate); err != nil {
		return fmt.Errorf("--rate: %v", err)
	}
	if c.Duration < 0 {
		return fmt.Errorf("--duration %s: must not be negative", c.Duration)
	}
	if c.WorkerConcurrency < 1 {
		return fmt.Errorf("worker concurrency %d: must be at least 1", c.WorkerConcurrency)
	}
	seen := map[int]string{}
	for _, p := range c.ports() {
		if p.port < 1 || p.port > 65535 {
			return fmt.Errorf("%s %d: want a port from 1 to 65535", p.flag, p.port)
		}
		if other, ok := seen[p.port]; ok {
			return fmt.Errorf("%s and %s both name port %d: give each service its own port", other, p.flag, p.port)
		}
		seen[p.port] = p.flag
	}
	return nil
}

type namedPort struct {
	flag string
	port int
}

func (c Config) ports() []namedPort {
	ps := []namedPort{{"--sweeper-port", c.SweeperPort}, {"--queue-port", c.QueuePort}, {"--sandbox-port", c.SandboxPort}}
	for _, p := range c.WorkerPorts {
		ps = append(ps, namedPort{"--worker-ports", p})
	}
	if c.SecondSweeperPort != 0 {
		ps = append(ps, namedPort{"the second sweeper's port", c.SecondSweeperPort})
	}
	return ps
}

// checkPorts fails with one line naming the first busy port and its flag,
// before anything is started.
func (c Config) checkPorts() error {
	for _, p := range c.ports() {
		ln, err := net.Listen("tcp", addr(p.port))
		if err != nil {
			return fmt.Errorf("port %d is busy (%s): stop what listens there (ss -ltnp 'sport = :%d'; an earlier owedctl dev?) or choose another port with %s",
				p.port, p.flag, p.port, p.flag)
		}
		ln.Close()
	}
	return nil
}

func addr(port int) string    { return "127.0.0.1:" + strconv.Itoa(port) }
func httpURL(port int) string { return "http://" + addr(port) }

// Endpoints are what a user or a test needs to reach the running stack. The
// secrets are made for this run only.
type Endpoints struct {
	API, QueueURL, SandboxURL string
	// SweeperURLs lists every sweeper, API first.
	SweeperURLs               []string
	WorkerURLs                []string
	QueueToken, CronSecret    string
	ServiceToken, TenantToken string
	// WebhookSecret signs the workers' sends to the sandbox.
	WebhookSecret string
	// AppURL is the application role's database URL.
	AppURL string
}

// Stack is one running development system. Start it, Wait for the end, Stop
// it; Stop is safe to call twice or before Start.
type Stack struct {
	cfg     Config
	ep      Endpoints
	started time.Time
	resumed bool

	cluster *cluster
	appDB   *sql.DB
	ledger  *ledger.Ledger
	queue   *queue.Client
	sandbox *sandbox.Client
	// procMu guards procs, which a restart changes while the stack runs.
	procMu sync.Mutex
	procs  []*proc
	// queueFaults are the emulator faults a drill set last, applied again
	// after the emulator restarts (it starts with none).
	queueFaultsMu sync.Mutex
	queueFaults   *emulator.Faults
	sched         *scheduler
	seeder        *seeder
	rate          pace.Rate
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
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rate, _ := pace.ParseRate(cfg.Rate)
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
	if err := s.cfg.checkPorts(); err != nil {
		return err
	}
	if err := s.prepareDir(ctx); err != nil {
		return err
	}
	s.printMode()
	ownerURL, appURL, err := s.database(ctx)
	if err != nil {
		return err
	}
	if err := s.migrate(ctx, ownerURL); err != nil {
		return err
	}
	if s.appDB, err = sql.Open("postgres", appURL); err != nil {
		return fmt.Errorf("open the application database: %w", err)
	}
	s.ledger = ledger.New(s.appDB, nil)
	if err := s.startChildren(ctx, bins, ownerURL, appURL); err != nil {
		return err
	}
	if s.ep.TenantToken, _, err = api.NewTokens(s.appDB, nil).Create(ctx, Tenant, "owedctl dev"); err != nil {
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

// progress adds one step to the start-up line ("starting: postgres
// migrated queue …"), so a slow step shows where it is.
func (s *Stack) progress(step string) {
	if !s.inProgress {
		io.WriteString(s.cfg.Out, "starting:")
		s.inProgress = true
	}
	io.WriteString(s.cfg.Out, " "+step)
}

// endProgress ends the start-up line, if one is open.
func (s *Stack) endProgress(result string) {
	if s.inProgress {
		fmt.Fprintf(s.cfg.Out, " — %s\n", result)
		s.inProgress = false
	}
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
		for j > 0 && procs[j-1].worker && procs[i-1].worker {
			j--
		}
		errc := make(chan error, i-j)
		for _, p := range procs[j:i] {
			go func() { errc <- p.stop(stopTimeout, force) }()
		}
		for range i - j {
			if err := <-errc; err != nil {
				errs = append(errs, err)
			}
		}
		i = j
	}
	if s.appDB != nil {
		s.appDB.Close()
	}
	if s.cluster != nil {
		if err := s.cluster.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

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
// grace periods (SIGKILL, PostgreSQL stopped immediately) but still leaves
// nothing running: the signal is caught here, not left to kill owedctl and
// orphan its children.
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

func (s *Stack) logDir() string { return filepath.Join(s.cfg.Dir, "logs") }

// markerFile says a folder is owedctl dev's own, so --fresh may delete it.
const markerFile = "OWED-DEV-FOLDER"

// prepareDir wipes the folder for --fresh (only if it is ours) and creates
// the folders of this run.
func (s *Stack) prepareDir(ctx context.Context) error {
	dir := s.cfg.Dir
	_, statErr := os.Stat(filepath.Join(dir, "pg", "data", "PG_VERSION"))
	s.resumed = statErr == nil && s.cfg.DatabaseURL == "" && !s.cfg.Fresh
	if s.cfg.Fresh {
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			if _, err := os.Stat(filepath.Join(dir, markerFile)); err != nil {
				return fmt.Errorf("--fresh: refusing to wipe %s: it was not created by owedctl dev (no %s file); choose another --dir", dir, markerFile)
			}
			// A cluster an earlier run left running must stop before its
			// folder goes.
			if c, err := newCluster(dir, s.logDir()); err == nil {
				c.stopLeftover(ctx)
			}
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("--fresh: wipe %s: %w", dir, err)
			}
		}
	}
	if err := os.MkdirAll(s.logDir(), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", s.logDir(), err)
	}
	return os.WriteFile(filepath.Join(dir, markerFile),
		[]byte("This folder belongs to owedctl dev (make run); `owedctl dev --fresh` deletes it.\n"), 0o644)
}

// database starts or reuses the local cluster, or takes cfg.DatabaseURL, and
// returns the owner's and the application role's URLs.
func (s *Stack) database(ctx context.Context) (ownerURL, appURL string, err error) {
	if s.cfg.DatabaseURL != "" {
		return s.cfg.DatabaseURL, s.cfg.DatabaseURL, nil
	}
	c, err := newCluster(s.cfg.Dir, s.logDir())
	if err != nil {
		return "", "", err
	}
	s.cluster = c
	if err := c.start(ctx); err != nil {
		return "", "", err
	}
	s.progress("postgres")
	return c.url(ownerRole), c.url(appRole), nil
}

func (s *Stack) migrate(ctx context.Context, ownerURL string) error {
	db, err := sql.Open("postgres", ownerURL)
	if err != nil {
		return fmt.Errorf("open the database as its owner: %w", err)
	}
	defer db.Close()
	applied, err := migrate.Up(ctx, db)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	s.progress(fmt.Sprintf("migrated(%d applied)", len(applied)))
	return nil
}

// secret returns n random bytes, hex-encoded.
func secret(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// webhookSecret returns a Standard Webhooks secret for the sandbox and the
// workers that sign for it.
func webhookSecret() string {
	b := make([]byte, 24)
	rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// writeEnvFile writes Dir/env, which a second shell sources to use owedctl
// and curl against this run. It holds this run's secrets, so only the
// owner may read it.
func (s *Stack) writeEnvFile() error {
	ep := s.ep
	body := fmt.Sprintf("# owedctl dev, started %s. Source it: . %s\n"+
		"export OWED_QUEUE_URL=%s\nexport OWED_QUEUE_TOKEN=%s\nexport OWED_DATABASE_URL='%s'\n"+
		"export OWED=%s\nexport TOKEN=%s\nexport OWED_API_TOKEN=%s\nexport OWED_CRON_SECRET=%s\n",
		s.started.Format(time.RFC3339), s.envPath(), ep.QueueURL, ep.QueueToken, ep.AppURL,
		ep.API, ep.TenantToken, ep.ServiceToken, ep.CronSecret)
	if err := os.WriteFile(s.envPath(), []byte(body), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", s.envPath(), err)
	}
	return nil
}

func (s *Stack) envPath() string { return filepath.Join(s.cfg.Dir, "env") }
