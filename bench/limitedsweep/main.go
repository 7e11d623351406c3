// Command limitedsweep is the provider-limited run with the draining sweep
// (issue 15, benchmark 4), on the wall clock: the real bin/sweeper (the
// cron called strictly once a minute, OWED_SWEEP_ON_NOTIFY on, the
// workers' OWED_PROVIDER_RATE given to it too, so its backpressure cap is
// the pace × OWED_QUEUE_DEPTH) and bin/worker processes in
// front of a sandbox enforcing the same rate with a burst of 3.
//
// Before the first cron call a requeue backlog is waiting: -requeue rows
// published long ago whose messages were lost and whose lease ran out,
// enough to keep the provider busy for the whole run; the sweep's requeue
// slice may take up to the cap each run (OWED_SWEEP_REQUEUE_BATCH). While
// it drains, new rows fall due at -new-rate, each scheduled due now (the
// ledger's trigger notifies, and the sweeper's fast path publishes it). It
// reports the queue's largest depth (visible + in flight + delayed, sampled
// every 100 ms) and the ledger's largest outstanding work against the cap,
// accepted sends ÷ what the rate allowed over the measured stretch, and for
// the new rows the lateness of their publish (published_at − due_at: the
// sweep's part, which must not wait for the requeues) and of their delivery
// (delivered_at − due_at: behind the older requeued rows already queued,
// which is the ordering rule, not starvation).
//
//	make build && scripts/with-postgres.sh go run ./bench/limitedsweep
//	make build && scripts/with-postgres.sh go run ./bench/limitedsweep -duration 2m -rate 50
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/bench/internal/stack"
	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/sweep"
)

const (
	tenants = 20
	// publishLateTarget bounds a new row's publish lateness at p99: a
	// notify run held back by the cap pauses a second before it looks for
	// room again.
	publishLateTarget = 2 * time.Second
	acceptedTarget    = 0.99
)

type opts struct {
	rate, workers, concurrency, requeue int
	newRate                             float64
	duration, warmup, cron, depth       time.Duration
	bin, queue                          string
}

func main() { benchutil.Main("bench/limitedsweep", run) }

func run() error {
	var o opts
	flag.IntVar(&o.rate, "rate", 50, "provider rate per second (the sandbox's limit and OWED_PROVIDER_RATE)")
	flag.Float64Var(&o.newRate, "new-rate", 5, "new rows falling due per second during the run")
	flag.IntVar(&o.requeue, "requeue", 0, "rows waiting past their lease at the start; 0 is rate × (warm-up + duration + 1 minute)")
	flag.IntVar(&o.workers, "workers", 2, "worker processes")
	flag.IntVar(&o.concurrency, "concurrency", 16, "OWED_WORKER_CONCURRENCY")
	flag.DurationVar(&o.duration, "duration", 3*time.Minute, "measured stretch after the warm-up")
	flag.DurationVar(&o.warmup, "warmup", 10*time.Second, "time after the first cron call that is not measured")
	flag.DurationVar(&o.depth, "depth", sweep.QueueDepthDefault, "the sweeper's OWED_QUEUE_DEPTH")
	flag.StringVar(&o.bin, "bin", "bin", "folder holding the sweeper and worker binaries")
	flag.StringVar(&o.queue, "queue", backends.Default, "queue backend: "+strings.Join(backends.Names, ", "))
	flag.Parse()
	// The hosted cron calls the sweeper once a minute, as the docs deploy it;
	// between its calls the sweeper tops the queue up itself.
	o.cron = time.Minute
	if err := stack.CheckQueue(o.queue); errors.Is(err, stack.ErrNoSQSServer) {
		fmt.Fprintf(os.Stderr, "bench/limitedsweep: skipping -queue sqs: %v\n", err)
		return nil
	} else if err != nil {
		return err
	}
	if o.requeue == 0 {
		o.requeue = o.rate * int((o.warmup + o.duration + time.Minute).Seconds())
	}
	ctx := context.Background()
	db, err := benchutil.NewDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := requeueBacklog(ctx, db, o.requeue); err != nil {
		return err
	}
	rate := fmt.Sprintf("%d/s", o.rate)
	r, err := pace.ParseRate(rate)
	if err != nil {
		return err
	}
	cap := sweep.Config{QueueDepth: o.depth}.PacedCap(r)
	st, err := stack.Start(ctx, stack.Config{DB: db, Bin: o.bin, Queue: o.queue, Workers: o.workers, Concurrency: o.concurrency,
		ProviderRate: rate, SandboxRate: rate, SandboxBurst: 3, MaxSends: o.requeue + 100000, SweepBatch: 500,
		SweepRequeueBatch: cap, PublishAhead: time.Minute, SweepOnNotify: true,
		Env: map[string]string{"OWED_QUEUE_DEPTH": o.depth.String()}})
	if err != nil {
		return err
	}
	defer st.Stop()
	q, err := backends.Open(ctx, st.Queue.Config, zerolog.Nop())
	if err != nil {
		return err
	}
	defer q.Close()
	fmt.Fprintf(os.Stderr, "bench/limitedsweep: %d rows waiting past their lease, %s queue, %d×%d workers, provider %s, cap %d, new rows %.0f/s, cron every %s, measuring %s after %s…\n",
		o.requeue, o.queue, o.workers, o.concurrency, rate, cap, o.newRate, o.cron, o.duration, o.warmup)

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var maxDepth atomic.Int64
	var sweeps []sweep.Result
	wg.Go(func() { sweeps = cron(runCtx, st, o.cron) })
	wg.Go(func() { sample(runCtx, q, &maxDepth) })
	var maxHeld atomic.Int64
	wg.Go(func() { sampleOutstanding(runCtx, db, &maxHeld) })
	l := ledger.New(db.App, nil)
	var newErr error
	wg.Go(func() { newErr = newRows(runCtx, l, o.newRate) })

	time.Sleep(o.warmup)
	s0, t0 := st.Sandbox.Stats(), time.Now()
	r0, err := st.Receives(ctx)
	if err != nil {
		stop()
		return err
	}
	time.Sleep(o.duration)
	s1, t1 := st.Sandbox.Stats(), time.Now()
	r1, err := st.Receives(ctx)
	stop()
	if err != nil {
		return err
	}
	wg.Wait()
	if newErr != nil {
		return newErr
	}
	// The last new rows get the time the target allows to be published.
	time.Sleep(publishLateTarget + time.Second)
	accepted := float64(s1.Accepted - s0.Accepted)
	allowed := float64(o.rate) * t1.Sub(t0).Seconds()
	acc := accepted / allowed
	limited := float64(s1.RateLimited - s0.RateLimited)
	rec := r1.Sub(r0)
	late, err := lateness(ctx, db)
	if err != nil {
		return err
	}
	requeued := 0
	for _, s := range sweeps {
		requeued += s.Requeued
	}
	label := fmt.Sprintf("%s, %s, %d×%d, cron 1/%s + notify, %s", stack.QueueLabel(o.queue), rate, o.workers, o.concurrency, o.cron, o.duration)
	tag := o.queue
	p99ok := late.publishP99 <= publishLateTarget.Seconds()*1000
	benchutil.Report([]benchutil.Row{
		{Name: "limitedsweep: accepted ÷ allowed, " + label, Value: benchutil.One(100 * acc), Unit: "%",
			Target: fmt.Sprintf("≥ %.0f", 100*acceptedTarget), Pass: benchutil.Check(acc >= acceptedTarget)},
		{Name: "limitedsweep: 429s ÷ attempts, " + tag, Value: benchutil.One(100 * limited / max(1, accepted+limited)), Unit: "%"},
		{Name: "limitedsweep: receives per delivery (workers' messages counter), " + tag, Value: benchutil.One(rec.PerDelivery()), Unit: "recv"},
		// The queue also holds, for a moment, the messages of rows already
		// settled whose acks the workers batch: at most one per send in
		// flight.
		{Name: fmt.Sprintf("limitedsweep: max queue depth (cap %d + %d sends in flight), %s", cap, o.workers*o.concurrency, tag),
			Value: benchutil.One(float64(maxDepth.Load())), Unit: "msgs", Target: fmt.Sprintf("≤ %d", cap+o.workers*o.concurrency),
			Pass: benchutil.Check(maxDepth.Load() <= int64(cap+o.workers*o.concurrency))},
		{Name: fmt.Sprintf("limitedsweep: max outstanding in the ledger (cap %d), %s", cap, tag), Value: benchutil.One(float64(maxHeld.Load())), Unit: "rows",
			Target: fmt.Sprintf("≤ %d", cap), Pass: benchutil.Check(maxHeld.Load() <= int64(cap))},
		{Name: fmt.Sprintf("limitedsweep: requeued rows (%d waiting at the start), cron runs %d, %s", o.requeue, len(sweeps), tag),
			Value: benchutil.One(float64(requeued)), Unit: "rows"},
		{Name: fmt.Sprintf("limitedsweep: new rows (%d, due now) published − due p50, %s", late.n, tag), Value: benchutil.One(late.publishP50), Unit: "ms"},
		{Name: "limitedsweep: new rows published − due p99, " + tag, Value: benchutil.One(late.publishP99), Unit: "ms",
			Target: fmt.Sprintf("≤ %d", publishLateTarget.Milliseconds()), Pass: benchutil.Check(late.n > 0 && late.unpublished == 0 && p99ok)},
		{Name: fmt.Sprintf("limitedsweep: new rows delivered (%d of %d) − due p50 / p99 (behind older requeued rows), %s", late.delivered, late.n, tag),
			Value: benchutil.Summary{Median: late.deliverP50, Min: late.deliverP50, Max: late.deliverP99, N: 1}, Unit: "ms"},
		{Name: "limitedsweep: duplicate sends (sandbox), " + tag, Value: benchutil.One(float64(s1.Duplicates)), Unit: "sends",
			Target: "0", Pass: benchutil.Check(s1.Duplicates == 0)},
	})
	return nil
}

// requeueBacklog schedules n rows due twenty minutes ago and makes them
// what a lost batch of messages leaves: queued, published fifteen minutes
// ago, their lease run out, nothing on the queue.
func requeueBacklog(ctx context.Context, db *benchutil.DB, n int) error {
	due := time.Now().Add(-20 * time.Minute)
	if err := benchutil.Schedule(ctx, ledger.New(db.App, nil), "stale", n, tenants, func(int) time.Time { return due }); err != nil {
		return err
	}
	return db.OwnerTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
UPDATE owed_notifications
   SET state = 'queued', published_at = now() - interval '15 minutes', lease_until = now() - interval '1 second'
 WHERE ref_id LIKE 'stale-%'`)
		return err
	})
}

// cron calls the sweep at once and then every interval until ctx ends, and
// returns the results.
func cron(ctx context.Context, st *stack.Stack, every time.Duration) []sweep.Result {
	var out []sweep.Result
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		res, err := st.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "bench/limitedsweep: sweep:", err)
		} else if err == nil {
			fmt.Fprintf(os.Stderr, "bench/limitedsweep: cron: slices=%d leased=%d requeued=%d published=%d outstanding=%d/%d held_back=%q %dms\n",
				res.Slices, res.Leased, res.Requeued, res.Published, res.Outstanding, res.MaxOutstanding, res.HeldBack, res.DurationMS)
			out = append(out, res)
		}
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
	}
}

// sample records the queue's largest depth.
func sample(ctx context.Context, q queue.Queue, most *atomic.Int64) {
	for clock.Sleep(ctx, 100*time.Millisecond) {
		s, err := q.Stats(ctx)
		if err != nil {
			continue
		}
		if d := s.Visible + s.InFlight + s.Delayed; d > most.Load() {
			most.Store(d)
		}
	}
}

// sampleOutstanding records the largest count of rows a live lease holds
// (leased, queued, sending), every half second, read as the owner.
func sampleOutstanding(ctx context.Context, db *benchutil.DB, most *atomic.Int64) {
	for clock.Sleep(ctx, 500*time.Millisecond) {
		var n int64
		err := db.OwnerTx(ctx, func(tx *sql.Tx) error {
			return tx.QueryRowContext(ctx, `SELECT count(*) FROM owed_notifications
 WHERE settled_at IS NULL AND state <> 'pending' AND lease_until > now()`).Scan(&n)
		})
		if err == nil && n > most.Load() {
			most.Store(n)
		}
	}
}

// newRows schedules one row due now at rate until ctx ends, each in its own
// transaction as the API's would be, spread over the tenants.
func newRows(ctx context.Context, l *ledger.Ledger, rate float64) error {
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for i := 0; ; i++ {
		ref := fmt.Sprintf("new-%d", i)
		_, err := l.Schedule(ctx, fmt.Sprintf("tenant-%d", i%tenants), []ledger.NewNotification{{Recipient: ref, Channel: "sms",
			Kind: "reminder", RefID: ref, DueAt: time.Now(), Payload: []byte(`{"text":"new"}`)}})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("schedule a new row: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// late is the new rows' lateness, in milliseconds, on the database's clock.
type late struct {
	n, unpublished, delivered                      int
	publishP50, publishP99, deliverP50, deliverP99 float64
}

// lateness reads the new rows' publish and delivery lateness. A new row's
// published_at is the sweep's lease of it (written queued just before its
// publish); a row without one (a requeue a worker claimed before the
// sweep's mark) is counted by its claim instead (claimed after its message
// was published).
func lateness(ctx context.Context, db *benchutil.DB) (late, error) {
	var r late
	err := db.OwnerTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `
SELECT count(*),
       count(*) FILTER (WHERE coalesce(published_at, claimed_at, delivered_at) IS NULL),
       count(delivered_at),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY p), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY p), 0),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY d), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY d), 0)
  FROM (SELECT extract(epoch FROM coalesce(published_at, claimed_at, delivered_at) - due_at)::float8 * 1000 AS p,
               extract(epoch FROM delivered_at - due_at)::float8 * 1000 AS d,
               published_at, claimed_at, delivered_at
          FROM owed_notifications WHERE ref_id LIKE 'new-%') x`).
			Scan(&r.n, &r.unpublished, &r.delivered, &r.publishP50, &r.publishP99, &r.deliverP50, &r.deliverP99)
	})
	return r, err
}
