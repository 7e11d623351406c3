package drill

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	_ "github.com/lib/pq" // the postgres driver

	"github.com/owedhq/owed/internal/devstack"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/emulator"
)

// Settings the drill gives the services so that healing fits a short run:
// the production defaults (a 75 s claim lease, a 60 s sweep lease, a 10 m
// requeue) are right for a minute cron and would make a drill last an hour.
var (
	drillWorkerEnv = map[string]string{
		// The claim lease is the send timeout plus the visibility timeout:
		// 8 s, so a row whose worker was killed mid-send is sent again
		// within seconds.
		"OWED_SEND_TIMEOUT":       "3s",
		"OWED_VISIBILITY_TIMEOUT": "5s",
		// The production retry schedules span hours (a receiver down for
		// a deploy is waited out); the drill's faults heal in seconds, so
		// its retries are the old short backoff.
		"OWED_RETRY_SCHEDULE":         "1s,2s,4s,8s",
		"OWED_RETRY_SCHEDULE_WEBHOOK": "1s,2s,4s,8s",
		// The sweeper's requeue window, which the worker gives a row whose
		// message it returned to the queue: a queue restart that loses the
		// message (SQS) heals in 30 s, as a lost published message does.
		"OWED_REQUEUE_AFTER": requeueAfter,
	}
	drillSweeperEnv = map[string]string{
		// The sweeper's lease is its budget plus 10 s: a sweeper killed
		// between publish and mark leaves its rows for 20 s.
		"OWED_SWEEP_BUDGET":  "10s",
		"OWED_REQUEUE_AFTER": requeueAfter,
		// Large batches keep a sweep publishing chunk after chunk, so a
		// kill lands between a publish and its queued mark more often.
		"OWED_SWEEP_BATCH": "2000",
	}
)

// requeueAfter is OWED_REQUEUE_AFTER of the drill's sweepers and workers
// (10m in production): how long a row whose message was lost waits before
// it is published again.
const requeueAfter = "30s"

// drillWorkerConcurrency keeps many sends in flight per worker, widening the
// window between the provider's accept and the ledger write that a kill can
// land in.
const drillWorkerConcurrency = 16

// The injected fault strengths the issue names.
const (
	provider5xxRate     = 0.20
	providerTimeoutRate = 0.05
	// providerHangSeconds outlasts the worker's 3 s send timeout.
	providerHangSeconds  = 4
	queueRedeliveryRate  = 0.10
	queuePublish503Rate  = 0.10
	queueRetryAfterSecs  = 1
	quiesceLimit         = 20 * time.Second
	apiTimeout           = time.Minute
	childRestartAttempts = 10
	// stuckAfter is how long the owed count may stay put while draining
	// before the drill describes the rows (stuckRows).
	stuckAfter = 30 * time.Second
)

// Run runs one drill: it starts the stack in cfg.Dir (wiping it), schedules
// the workload, injects the faults while the rows fall due, clears them,
// waits for the ledger to drain, checks every invariant and stops the
// stack. The error is about the drill itself (the stack would not start);
// broken invariants are in Result.Violations.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ports, releasePorts, err := devstack.ReservePorts(8)
	if err != nil {
		return nil, err
	}
	defer releasePorts()
	workers := 2
	sc := devstack.Config{Dir: cfg.Dir, BinDir: cfg.BinDir, Queue: cfg.Queue, Fresh: true, Tick: cfg.Tick, Rate: cfg.Rate, NoSeed: true,
		SweeperPort: ports[0], QueuePort: ports[1], SandboxPort: ports[2], Tuning: devstack.Tuning{
			WorkerConcurrency: drillWorkerConcurrency, SweeperEnv: drillSweeperEnv, WorkerEnv: drillWorkerEnv}}
	if cfg.has(Scale) {
		workers = 4
		sc.Tuning.SecondSweeperPort = ports[3]
	}
	sc.WorkerPorts = ports[4 : 4+workers]
	if cfg.has(PGFailover) {
		sc.Tuning.Standby = true
	}
	if cfg.has(PGCrash) || cfg.has(PGFailover) {
		// The emulator keeps its messages in this PostgreSQL with
		// synchronous_commit off for speed: a crash or a failover could
		// lose its last commits (a dead letter, an ack), which no hosted
		// queue does. The drill tests the ledger's durability, so the
		// emulator's commits are durable too.
		sc.Tuning.QueueEnv = map[string]string{"OWED_QUEUE_SYNCHRONOUS_COMMIT": "true"}
	}
	s, err := devstack.New(sc)
	if err != nil {
		return nil, err
	}
	defer s.Stop()
	began := time.Now()
	fmt.Fprintf(cfg.Out, "drill: starting the stack in %s (seed %d)\n", cfg.Dir, cfg.Seed)
	if err := s.Start(ctx); err != nil {
		return nil, fmt.Errorf("start the stack: %w", err)
	}
	ep := s.Endpoints()
	db, err := sql.Open("postgres", ep.AppURL)
	if err != nil {
		return nil, fmt.Errorf("open the ledger: %w", err)
	}
	defer db.Close()

	inj := &injector{cfg: cfg, s: s, out: cfg.Out, counts: map[string]int{}}
	if err := inj.setProviderFaults(ctx, true, false); err != nil {
		return nil, err
	}
	if err := inj.setQueueFaults(ctx, true); err != nil {
		return nil, err
	}

	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	start := time.Now()
	rows, ins := plan(cfg, start, rng)
	api := newClient(ep.API, ep.TenantToken, apiTimeout)
	if err := api.schedule(ctx, rows, ins); err != nil {
		return nil, err
	}
	scheduleTime := time.Since(start)
	fmt.Fprintf(cfg.Out, "drill: scheduled %d rows in %.1fs; injecting %v for %s\n",
		len(rows), scheduleTime.Seconds(), cfg.Faults, cfg.Spread)

	// The fault window: every injector stops when the last row has fallen
	// due; the cancel rows are cancelled half-way through it.
	window, endWindow := context.WithDeadline(ctx, start.Add(cfg.Spread))
	inj.start = start
	inj.run(window, rng.Uint64())
	inj.goRun(func() { inj.cancelRows(window, api, rows) })
	select {
	case <-window.Done():
	case <-s.Died():
	}
	endWindow()
	inj.wait()
	faultsCleared := time.Now()
	if err := inj.clear(context.WithoutCancel(ctx)); err != nil {
		inj.fail(err)
	}
	fmt.Fprintf(cfg.Out, "drill: faults cleared after %.0fs; draining\n", time.Since(start).Seconds())

	deadline := began.Add(cfg.DurationLimit)
	drained, err := drain(ctx, db, s, deadline, cfg)
	if err != nil {
		return nil, err
	}
	res := &Result{Seed: cfg.Seed, Queue: cfg.Queue, Faults: cfg.Faults, Injected: inj.counts, Workers: workers, Tick: cfg.Tick,
		Rate: cfg.Rate, Spread: cfg.Spread, ScheduleTime: scheduleTime}
	if drained {
		res.DrainTime = time.Since(faultsCleared)
	}
	// Messages still moving (a redelivered copy of a settled row) may yet
	// reach a worker; let them settle before counting sends.
	quiesce(ctx, s)
	var lostBefore time.Time
	if devstack.QueueInMemory(cfg.Queue) {
		lostBefore = inj.queueBack
	}
	checkStart := time.Now()
	if err := check(ctx, db, s, rows, lostBefore, res); err != nil {
		return nil, err
	}
	res.CheckTime = time.Since(checkStart)
	res.Total = time.Since(began)
	res.Violations = append(res.Violations, inj.errs...)
	if err := s.DiedErr(); err != nil {
		res.Violations = append(res.Violations, "a child died on its own: "+err.Error())
	}
	logDir := s.LogDir()
	if err := s.Stop(); err != nil {
		res.Violations = append(res.Violations, "stopping the stack: "+err.Error())
	}
	// The logs are complete only once every child has stopped.
	found, err := secretsInLogs(logDir, ep)
	if err != nil {
		return nil, err
	}
	res.LogDir = logDir
	res.SecretsInLogs = found
	for _, f := range found {
		res.Violations = append(res.Violations, "a secret is in a log: "+f)
	}
	return res, nil
}

// drain waits until no row is owed, the deadline passes, or a child dies. It
// reports whether everything settled.
func drain(ctx context.Context, db *sql.DB, s *devstack.Stack, deadline time.Time, cfg Config) (bool, error) {
	last := time.Time{}
	// flat is when the count last changed; a count that stays put for
	// stuckAfter has its rows described once, while they are stuck.
	flat, prev, described := time.Now(), -1, false
	for {
		owed, err := countOwed(ctx, db)
		if err != nil {
			return false, fmt.Errorf("count the rows still owed: %w", err)
		}
		if owed == 0 {
			return true, nil
		}
		if owed != prev {
			flat, prev, described = time.Now(), owed, false
		}
		if time.Since(last) > 10*time.Second {
			fmt.Fprintf(cfg.Out, "drill: %d rows still owed\n", owed)
			last = time.Now()
		}
		if !described && time.Since(flat) > stuckAfter {
			described = true
			lines, err := stuckRows(ctx, db)
			if err != nil {
				return false, fmt.Errorf("describe the rows still owed: %w", err)
			}
			fmt.Fprintf(cfg.Out, "drill: no row settled for %s:\n  %s\n", stuckAfter, strings.Join(lines, "\n  "))
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		if cfg.StallLimit > 0 && time.Since(flat) > cfg.StallLimit {
			fmt.Fprintf(cfg.Out, "drill: no row settled for %s (--stall-limit); giving up the drain\n", cfg.StallLimit)
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-s.Died():
			return false, nil
		case <-time.After(time.Second):
		}
	}
}

// quiesce waits, up to quiesceLimit, until the queue holds no visible or
// in-flight message.
func quiesce(ctx context.Context, s *devstack.Stack) {
	end := time.Now().Add(quiesceLimit)
	for time.Now().Before(end) {
		st, err := s.Queue().Stats(ctx)
		if err == nil && st.Visible == 0 && st.InFlight == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// sandboxFaults are the provider faults of the drill when on, with or
// without the storm. The permanent-failure pattern is always set: the stack
// starts the sandbox with it and SetFaults replaces every field.
func (inj *injector) sandboxFaults(on, storm bool) sandbox.Faults {
	f := sandbox.Faults{PermanentRecipient: devstack.PermanentRecipient}
	if on && inj.cfg.has(Provider5xx) {
		f.ErrorRate = provider5xxRate
	}
	if on && inj.cfg.has(ProviderTimeouts) {
		f.TimeoutRate, f.TimeoutSeconds = providerTimeoutRate, providerHangSeconds
	}
	if storm {
		f.StormSeconds = inj.cfg.Storm.Seconds()
		// The Retry-After is most of the storm: a worker honouring it
		// comes back near its end, not before.
		f.StormRetryAfterSeconds = max(1, int(inj.cfg.Storm.Seconds()*0.8))
	}
	return f
}

func (inj *injector) setProviderFaults(ctx context.Context, on, storm bool) error {
	if err := inj.s.Sandbox().SetFaults(ctx, inj.sandboxFaults(on, storm)); err != nil {
		return fmt.Errorf("set the sandbox faults: %w", err)
	}
	return nil
}

// setQueueFaults sets the emulator's faults; other backends have none to
// set.
func (inj *injector) setQueueFaults(ctx context.Context, on bool) error {
	if inj.cfg.Queue != backends.REST {
		return nil
	}
	var f emulator.Faults
	if on && inj.cfg.has(QueueRedelivery) {
		f.RedeliveryRate = queueRedeliveryRate
	}
	if on && inj.cfg.has(QueuePublish503) {
		f.ThrottleRate, f.ThrottleStatus, f.ThrottleScope = queuePublish503Rate, http.StatusServiceUnavailable, emulator.ScopePublish
		f.RetryAfterSeconds = queueRetryAfterSecs
	}
	return inj.s.SetQueueFaults(ctx, f)
}

// clear ends every fault: the scheduler runs, the provider and the queue
// behave (the permanent recipient still bounces).
func (inj *injector) clear(ctx context.Context) error {
	inj.s.ResumeScheduler()
	return errors.Join(inj.setProviderFaults(ctx, false, false), inj.setQueueFaults(ctx, false))
}
