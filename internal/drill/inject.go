package drill

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/devstack"
)

// injector runs the fault schedule during the fault window and counts what
// it injected.
type injector struct {
	cfg Config
	s   *devstack.Stack
	out io.Writer
	// start is when the fault window opened.
	start time.Time
	wg    sync.WaitGroup
	// killMu serialises kills and restarts: two injectors restarting one
	// child at once would race for its port.
	killMu sync.Mutex

	mu     sync.Mutex
	counts map[string]int
	errs   []string
	// queueBack is when the queue server last came back from a kill, with
	// its queues: a dead letter written before it may have died with a
	// server that keeps them in memory.
	queueBack time.Time
}

func (inj *injector) goRun(fn func()) {
	inj.wg.Add(1)
	go func() {
		defer inj.wg.Done()
		fn()
	}()
}

func (inj *injector) wait() { inj.wg.Wait() }

func (inj *injector) count(what string) {
	inj.mu.Lock()
	inj.counts[what]++
	inj.mu.Unlock()
}

// fail records a fault the drill could not inject or undo: the drill did
// not test what it claims, which fails it like a broken invariant.
func (inj *injector) fail(err error) {
	inj.mu.Lock()
	inj.errs = append(inj.errs, "drill: "+err.Error())
	inj.mu.Unlock()
	fmt.Fprintf(inj.out, "drill: %v\n", err)
}

// run starts one goroutine per selected timed fault; they end with window.
// Each draws from its own generator, seeded from seed, so a seed repeats
// the same schedule.
func (inj *injector) run(window context.Context, seed uint64) {
	spread := inj.cfg.Spread
	at := func(frac float64) time.Duration { return time.Duration(float64(spread) * frac) }
	rngFor := func(i uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, i)) }
	if inj.cfg.has(WorkerKill) {
		rng := rngFor(1)
		inj.goRun(func() {
			for clock.Sleep(window, between(rng, time.Second, 4*time.Second)) {
				inj.kill(window, pick(rng, inj.named("worker-")), "worker kill -9")
			}
		})
	}
	if inj.cfg.has(SweeperKill) {
		rng := rngFor(2)
		inj.goRun(func() {
			for clock.Sleep(window, between(rng, 3*time.Second, 8*time.Second)) {
				inj.kill(window, pick(rng, inj.named("sweeper")), "sweeper kill -9")
			}
		})
	}
	if inj.cfg.has(QueueRestart) {
		inj.goRun(func() {
			for _, frac := range []float64{0.3, 0.7} {
				if !inj.sleepUntil(window, at(frac)) {
					return
				}
				inj.kill(window, "queue", "queue restart (kill -9)")
			}
		})
	}
	if inj.cfg.has(PGRestart) {
		inj.goRun(func() {
			if !inj.sleepUntil(window, at(0.5)) {
				return
			}
			inj.killMu.Lock()
			defer inj.killMu.Unlock()
			fmt.Fprintf(inj.out, "drill: pg_ctl restart -m fast\n")
			if err := inj.s.RestartPostgres(context.WithoutCancel(window)); err != nil {
				inj.fail(err)
				return
			}
			inj.count("postgres restart")
		})
	}
	if inj.cfg.has(PGCrash) {
		rng := rngFor(4)
		inj.goRun(func() {
			for i, target := range crashTargets {
				// One crash in each fifth of the window from 15%: 15–25%,
				// 35–45%, 55–65%. The first kills the postmaster, the
				// second stops it in immediate mode, the third either.
				how := []devstack.Crash{devstack.CrashKill, devstack.CrashImmediate}[min(i, 1)]
				if i == 2 && rng.IntN(2) == 0 {
					how = devstack.CrashKill
				}
				if !inj.sleepUntil(window, at(0.15+0.2*float64(i)+0.1*rng.Float64())) {
					return
				}
				inj.crashPostgres(window, target, how)
			}
		})
	}
	if inj.cfg.has(PGFailover) {
		inj.goRun(func() {
			if !inj.sleepUntil(window, at(0.8)) {
				return
			}
			inj.killMu.Lock()
			defer inj.killMu.Unlock()
			fmt.Fprintf(inj.out, "drill: PostgreSQL failover: the primary killed (kill -9 of every process), the synchronous standby promoted\n")
			ctx, cancel := context.WithTimeout(context.WithoutCancel(window), 2*time.Minute)
			defer cancel()
			if err := inj.s.FailoverPostgres(ctx); err != nil {
				inj.fail(err)
				return
			}
			inj.count("postgres failover")
		})
	}
	if inj.cfg.has(Provider429Storm) {
		inj.goRun(func() {
			if !inj.sleepUntil(window, at(0.4)) {
				return
			}
			fmt.Fprintf(inj.out, "drill: 429 storm for %s\n", inj.cfg.Storm)
			if err := inj.setProviderFaults(window, true, true); err != nil {
				inj.fail(err)
				return
			}
			inj.count("429 storm")
			// The storm ends by itself; setting the faults again would
			// start a new one, so nothing is undone here.
		})
	}
	if inj.cfg.has(SchedulerPause) {
		rng := rngFor(3)
		inj.goRun(func() {
			if !inj.sleepUntil(window, at(0.15)) {
				return
			}
			fmt.Fprintf(inj.out, "drill: scheduler paused for %s\n", inj.cfg.Pause)
			inj.s.PauseScheduler()
			inj.count("scheduler pause")
			clock.Sleep(window, inj.cfg.Pause)
			inj.s.ResumeScheduler()
			if inj.cfg.has(SweeperKill) {
				// The first sweep after the pause leases the rows that fell
				// due meanwhile and publishes them chunk after chunk; a
				// kill a moment into it lands between a publish and its
				// queued mark.
				if clock.Sleep(window, inj.cfg.Tick+between(rng, 50*time.Millisecond, 500*time.Millisecond)) {
					inj.kill(window, pick(rng, inj.named("sweeper")), "sweeper kill -9 mid-catch-up")
				}
			}
		})
	}
}

// crashTarget is a moment pg-crash aims at: a statement of one of the
// services in flight, named by what its text calls.
type crashTarget struct {
	name  string
	calls []string
}

// crashTargets are the three moments of pg-crash, in the order the crashes
// come (15–25%, 35–45%, 55–65% of the window): a worker's claim, a sweep
// leasing, marking or expiring rows, and a worker's settle. The order
// follows the other faults: claims go on while a scheduler pause (from 15%)
// stops the sweeps, the catch-up sweep comes when it ends (40% in make
// test's drill), and the 429 storm (from 40%) settles nothing delivered.
var crashTargets = []crashTarget{
	{"mid-claim", []string{"owed_claim_many"}},
	{"mid-sweep", []string{"owed_sweep_"}},
	{"mid-settle", []string{"owed_settle_delivered_many"}},
}

// crashCounted names each kind of crash in the table.
var crashCounted = map[devstack.Crash]string{devstack.CrashKill: "postgres crash (kill -9)",
	devstack.CrashImmediate: "postgres crash (-m immediate)"}

// crashAim bounds the wait for the target's statement to be in flight; a
// crash that did not see it in that time lands wherever the work is.
const crashAim = 5 * time.Second

// crashPostgres waits until a statement of target is in flight, then
// crashes PostgreSQL as how says and starts it again. It holds killMu
// throughout, so no child is restarted while the database is down.
func (inj *injector) crashPostgres(window context.Context, target crashTarget, how devstack.Crash) {
	inj.killMu.Lock()
	defer inj.killMu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(window), 2*time.Minute)
	defer cancel()
	aimed := inj.awaitStatement(ctx, target.calls)
	where := "with " + target.name + "'s statement in flight"
	if !aimed {
		where = "(no " + target.name + " statement seen in flight within " + crashAim.String() + ")"
	}
	fmt.Fprintf(inj.out, "drill: PostgreSQL crash: %s %s, then started again\n", how, where)
	if err := inj.s.CrashPostgres(ctx, how); err != nil {
		inj.fail(err)
		return
	}
	inj.count(crashCounted[how])
	if aimed {
		inj.count("postgres crash " + target.name)
	}
}

// awaitStatement polls the sessions until one is running, or is in the
// transaction of, a statement that calls one of calls, and reports whether
// it saw one within crashAim.
func (inj *injector) awaitStatement(ctx context.Context, calls []string) bool {
	end := time.Now().Add(crashAim)
	for time.Now().Before(end) {
		acts, _ := inj.s.PostgresActivity(ctx)
		for _, a := range acts {
			if a.State != "active" && a.State != "idle in transaction" {
				continue
			}
			for _, c := range calls {
				if strings.Contains(a.Query, c) {
					return true
				}
			}
		}
		if !clock.Sleep(ctx, 2*time.Millisecond) {
			return false
		}
	}
	return false
}

// kill kills -9 and restarts a child. A restart can fail while PostgreSQL
// or the queue is down (the child exits at start-up); it is tried again
// until it sticks, so the drill never goes on without a child it means to
// have.
func (inj *injector) kill(window context.Context, name, what string) {
	inj.killMu.Lock()
	defer inj.killMu.Unlock()
	// A restart outlives the window: a child left down would skew the
	// drain.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(window), 2*time.Minute)
	defer cancel()
	var err error
	for range childRestartAttempts {
		if err = inj.s.Kill(ctx, name); err == nil {
			inj.count(what)
			if name == "queue" {
				inj.mu.Lock()
				inj.queueBack = time.Now()
				inj.mu.Unlock()
			}
			return
		}
		clock.Sleep(ctx, 2*time.Second)
	}
	inj.fail(fmt.Errorf("%s of %s: %w", what, name, err))
}

// named lists the children whose names start with prefix.
func (inj *injector) named(prefix string) []string {
	var out []string
	for _, n := range inj.s.Children() {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

// cancelRows cancels the cancel rows half-way through the window, as an
// application would when the subject goes away. The API is on the sweeper,
// which a drill kills: a failed call is tried again.
func (inj *injector) cancelRows(window context.Context, api *client, rows []row) {
	if !inj.sleepUntil(window, inj.cfg.Spread/2) {
		return
	}
	ctx := context.WithoutCancel(window)
	for _, r := range rows {
		if r.kind != kindCancel {
			continue
		}
		var err error
		for range childRestartAttempts {
			if err = api.cancel(ctx, r.refID); err == nil {
				break
			}
			clock.Sleep(ctx, time.Second)
		}
		if err != nil {
			inj.fail(fmt.Errorf("cancel row %d: %w", r.id, err))
			return
		}
		inj.count("rows cancelled")
	}
}

// sleepUntil waits until offset into the fault window, and reports whether
// the window is still open.
func (inj *injector) sleepUntil(window context.Context, offset time.Duration) bool {
	return clock.Sleep(window, time.Until(inj.start.Add(offset)))
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

func pick(rng *rand.Rand, names []string) string { return names[rng.IntN(len(names))] }
