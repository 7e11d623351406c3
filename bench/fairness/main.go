// Command fairness measures issue 25's property, that no tenant makes
// another late, with real processes (bench/internal/stack: bin/sweeper with
// the minute cron, the fast path and its top-ups, and bin/worker processes)
// and two provider accounts: the sandbox paced at -rate a second
// (OWED_PROVIDER_RATES, the sandbox enforcing the same limit) carrying the
// sms channel, and an unpaced webhook account, a second sandbox, carrying
// the webhook channel.
//
//   - tenant A schedules -rows rows on the paced account, half through
//     event fan-outs of 1,000 recipients due now, half in batches due up to
//     ten minutes in the past, all through the API at the start;
//   - tenant B schedules -nudges nudges due over the next -window, each
//     expiring -expiry after its due time, half on each account;
//   - tenant C is paused with -paused rows owed.
//
// It prints B's lag (delivered − due) p50/p99 and rows expired on each
// account, A's drain time (start → A's last delivery) ÷ ((rows + B's nudges
// on the paced account) ÷ rate), and
// C's rows leased while paused, each against its bound: B expired 0; B's
// p99 ≤ 2 s on the unpaced account, and on the paced one ≤ the time a nudge
// can wait for its share: a top-up (half the depth), then the queue depth of other
// rows ahead of it (OWED_QUEUE_DEPTH of the account's sending), then the
// queue's whole-second delay; A ≤ 1.05× its provider-bound drain; C 0.
//
//	make build && scripts/with-postgres.sh go run ./bench/fairness -bin bin
//	make build && scripts/with-postgres.sh go run ./bench/fairness -bin bin -rows 12000 -nudges 400 -paused 2000
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/bench/internal/stack"
	"github.com/owedhq/owed/client"
	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/sweep"
)

const (
	tenantA, tenantB, tenantC = "tenant-a", "tenant-b", "tenant-c"
	// unpacedLagTarget is the bound on B's lag on the unpaced
	// account, where nobody else sends.
	unpacedLagTarget = 2 * time.Second
	// queueRounding is the most a queue's whole-second delays add.
	queueRounding = time.Second
	drainTarget   = 1.05
)

type opts struct {
	rows, nudges, paused, rate, workers, concurrency int
	window, expiry, depth                            time.Duration
	bin, queue                                       string
}

func main() { benchutil.Main("bench/fairness", run) }

func run() error {
	var o opts
	flag.IntVar(&o.rows, "rows", 100000, "tenant A's rows on the paced account, due now or up to 10 minutes ago")
	flag.IntVar(&o.nudges, "nudges", 1000, "tenant B's nudges, half on each account (at most 1,000: one request)")
	flag.IntVar(&o.paused, "paused", 10000, "tenant C's rows owed while it is paused")
	flag.IntVar(&o.rate, "rate", 100, "the paced account's rate per second (the sandbox's limit and OWED_PROVIDER_RATES)")
	flag.DurationVar(&o.window, "window", 2*time.Minute, "B's nudges fall due over this window from the start")
	flag.DurationVar(&o.expiry, "expiry", 2*time.Minute, "each nudge expires this long after its due time")
	flag.DurationVar(&o.depth, "depth", sweep.QueueDepthDefault, "the sweeper's OWED_QUEUE_DEPTH")
	flag.IntVar(&o.workers, "workers", 2, "worker processes")
	flag.IntVar(&o.concurrency, "concurrency", 16, "OWED_WORKER_CONCURRENCY")
	flag.StringVar(&o.bin, "bin", "bin", "folder holding the sweeper and worker binaries")
	flag.StringVar(&o.queue, "queue", backends.Default, "queue backend: "+strings.Join(backends.Names, ", "))
	flag.Parse()
	if o.nudges > ledger.MaxScheduleBatch {
		return fmt.Errorf("-nudges=%d: at most %d, one request", o.nudges, ledger.MaxScheduleBatch)
	}
	if err := stack.CheckQueue(o.queue); errors.Is(err, stack.ErrNoSQSServer) {
		fmt.Fprintf(os.Stderr, "bench/fairness: skipping -queue sqs: %v\n", err)
		return nil
	} else if err != nil {
		return err
	}
	ctx := context.Background()
	db, err := benchutil.NewDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()

	// The unpaced account: a second sandbox, behind the generic webhook
	// provider, that never limits.
	fast, err := sandbox.New(sandbox.Config{Rate: pace.Rate{Count: 1000000, Per: time.Second}, Burst: 1000000,
		MaxSends: o.nudges + 1000})
	if err != nil {
		return err
	}
	fastSrv := httptest.NewServer(fast)
	defer fastSrv.Close()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	rate := fmt.Sprintf("%d/s", o.rate)
	st, err := stack.Start(ctx, stack.Config{DB: db, Bin: o.bin, Queue: o.queue, Workers: o.workers, Concurrency: o.concurrency,
		SandboxRate: rate, SandboxBurst: 3, MaxSends: o.rows + o.nudges + o.paused + 1000, SweepBatch: 500,
		PublishAhead: time.Minute, SweepOnNotify: true, Env: map[string]string{
			"OWED_PROVIDER_WEBHOOK": "webhook", "OWED_WEBHOOK_URL": fastSrv.URL,
			"OWED_WEBHOOK_SECRET": "whsec_" + base64.StdEncoding.EncodeToString(key),
			"OWED_PROVIDER_RATES": "sandbox:" + rate + ",webhook:unlimited", "OWED_QUEUE_DEPTH": o.depth.String()}})
	if err != nil {
		return err
	}
	defer st.Stop()

	// Tenant C, paused before its rows are written.
	if _, err := db.Operator.ExecContext(ctx, `SELECT owed_tenant_pause($1, 'bench/fairness: paused tenant', 'bench', NULL)`, tenantC); err != nil {
		return err
	}
	l := ledger.New(db.App, nil)
	if err := scheduleC(ctx, l, o.paused); err != nil {
		return err
	}
	tokens := api.NewTokens(db.Admin, nil)
	clients := map[string]*client.Client{}
	for _, ten := range []string{tenantA, tenantB} {
		tok, _, err := tokens.Create(ctx, ten, "bench/fairness")
		if err != nil {
			return err
		}
		clients[ten] = client.New(st.SweeperURL(), tok, client.WithRetry(time.Minute))
	}
	fmt.Fprintf(os.Stderr, "bench/fairness: A %d rows on sms (sandbox, %s), B %d nudges over %s (half sms, half webhook, unpaced), C %d rows paused, %s queue, %d×%d workers…\n",
		o.rows, rate, o.nudges, o.window, o.paused, o.queue, o.workers, o.concurrency)

	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { cron(runCtx, st) })
	var aErr, bErr error
	var written time.Time
	wg.Go(func() { aErr = scheduleA(runCtx, clients[tenantA], o.rows, start); written = time.Now() })
	wg.Go(func() { bErr = scheduleB(runCtx, clients[tenantB], o, start) })
	deadline := start.Add(time.Duration(float64(o.rows)/float64(o.rate)*2*float64(time.Second)) + o.window + o.expiry + 5*time.Minute)
	waitErr := waitAB(runCtx, db, deadline)
	stop()
	wg.Wait()
	if err := errors.Join(aErr, bErr, waitErr); err != nil {
		return err
	}
	res, err := measure(ctx, db, start, written)
	if err != nil {
		return err
	}

	// The paced account also carries B's nudges on it: A's provider-bound
	// drain is both at the account's rate.
	ideal := float64(o.rows+res.b["sms"].n) / float64(o.rate)
	ratio := res.drainA / ideal
	topUp := sweep.Config{QueueDepth: o.depth}.TopUpEvery()
	pacedBound := o.depth + topUp + queueRounding
	label := fmt.Sprintf("%s, %d×%d", stack.QueueLabel(o.queue), o.workers, o.concurrency)
	rows := []benchutil.Row{
		{Name: fmt.Sprintf("fairness: B's nudges expired, paced account (%s), of %d", rate, res.b["sms"].n), Value: benchutil.One(float64(res.b["sms"].expired)),
			Unit: "rows", Target: "0", Pass: benchutil.Check(res.b["sms"].expired == 0)},
		{Name: fmt.Sprintf("fairness: B's nudges expired, unpaced account, of %d", res.b["webhook"].n), Value: benchutil.One(float64(res.b["webhook"].expired)),
			Unit: "rows", Target: "0", Pass: benchutil.Check(res.b["webhook"].expired == 0)},
		{Name: "fairness: B's lag (delivered − due) p50, paced account, behind A's " + fmt.Sprint(o.rows), Value: benchutil.One(res.b["sms"].p50), Unit: "ms"},
		{Name: fmt.Sprintf("fairness: B's lag p99, paced account (bound: top-up %s + queue depth %s + delay rounding %s)", topUp, o.depth, queueRounding),
			Value: benchutil.One(res.b["sms"].p99), Unit: "ms", Target: fmt.Sprintf("≤ %d", pacedBound.Milliseconds()),
			Pass: benchutil.Check(res.b["sms"].p99 <= benchutil.Ms(pacedBound))},
		{Name: "fairness: B's lag p50, unpaced account", Value: benchutil.One(res.b["webhook"].p50), Unit: "ms"},
		{Name: "fairness: B's lag p99, unpaced account", Value: benchutil.One(res.b["webhook"].p99), Unit: "ms",
			Target: fmt.Sprintf("≤ %d", unpacedLagTarget.Milliseconds()), Pass: benchutil.Check(res.b["webhook"].p99 <= benchutil.Ms(unpacedLagTarget))},
		{Name: fmt.Sprintf("fairness: A's drain %.0f s ÷ provider-bound %.0f s (%d rows and B's %d at %s), %s", res.drainA, ideal,
			o.rows, res.b["sms"].n, rate, label),
			Value: benchutil.One(ratio), Unit: "×", Target: fmt.Sprintf("≤ %.2f", drainTarget), Pass: benchutil.Check(ratio <= drainTarget)},
		{Name: "fairness: A's first delivery after the start (its rows posted through the API)", Value: benchutil.One(res.firstA), Unit: "s"},
		{Name: fmt.Sprintf("fairness: A's rows written through the API in %.0f s; A's deliveries/s after that (the pace: %d)",
			written.Sub(start).Seconds(), o.rate), Value: benchutil.One(res.rateAfterWritten), Unit: "/s"},
		{Name: fmt.Sprintf("fairness: C's rows leased while paused, of %d", o.paused), Value: benchutil.One(float64(res.leasedC)),
			Unit: "rows", Target: "0", Pass: benchutil.Check(res.leasedC == 0)},
		{Name: "fairness: duplicate sends (both sandboxes)", Value: benchutil.One(float64(st.Sandbox.Stats().Duplicates + fast.Stats().Duplicates)),
			Unit: "sends", Target: "0", Pass: benchutil.Check(st.Sandbox.Stats().Duplicates+fast.Stats().Duplicates == 0)},
	}
	benchutil.Report(rows)
	return nil
}

// cron calls the sweeper once a minute, from the start, as the hosted cron
// does; the fast path and the top-ups do the rest.
func cron(ctx context.Context, st *stack.Stack) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		if _, err := st.Sweep(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "bench/fairness: cron:", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

var text = client.Payload{Text: "hello"}

// scheduleA posts tenant A's rows: half as event fan-outs of 1,000
// recipients due at the start, half in batches of 1,000 due up to ten
// minutes before it (owed from when they are written, not from then).
func scheduleA(ctx context.Context, c *client.Client, n int, start time.Time) error {
	for i := 0; i < n/2; i += ledger.MaxScheduleBatch {
		e := client.Event{Kind: "shipment", RefID: fmt.Sprintf("event-%d", i), Channel: "sms", Payload: text, OccurredAt: start}
		for j := i; j < min(n/2, i+ledger.MaxScheduleBatch); j++ {
			e.Recipients = append(e.Recipients, client.EventRecipient{Recipient: fmt.Sprintf("+1555%07d", j)})
		}
		if _, err := c.Event(ctx, e); err != nil {
			return fmt.Errorf("tenant A's event: %w", err)
		}
	}
	for i := n / 2; i < n; i += ledger.MaxScheduleBatch {
		var batch []client.Notification
		for j := i; j < min(n, i+ledger.MaxScheduleBatch); j++ {
			due := start.Add(-time.Duration(mrand.Int64N(int64(10 * time.Minute))))
			batch = append(batch, client.Notification{Recipient: fmt.Sprintf("+1555%07d", j), Channel: "sms", Kind: "follow_up",
				RefID: fmt.Sprintf("batch-%d", j), DueAt: due, Payload: text})
		}
		if _, err := c.ScheduleMany(ctx, batch); err != nil {
			return fmt.Errorf("tenant A's batch: %w", err)
		}
	}
	return nil
}

// scheduleB posts tenant B's nudges in one request: due evenly over the
// window from the start, each expiring o.expiry after its due time, every
// other one on the unpaced account.
func scheduleB(ctx context.Context, c *client.Client, o opts, start time.Time) error {
	var batch []client.Notification
	for i := range o.nudges {
		due := start.Add(o.window * time.Duration(i+1) / time.Duration(o.nudges))
		exp := due.Add(o.expiry)
		ch := "sms"
		if i%2 == 1 {
			ch = "webhook"
		}
		batch = append(batch, client.Notification{Recipient: fmt.Sprintf("b%d", i), Channel: ch, Kind: "meeting_soon",
			RefID: fmt.Sprintf("nudge-%d", i), DueAt: due, ExpiresAt: &exp, Payload: text})
	}
	_, err := c.ScheduleMany(ctx, batch)
	return err
}

// scheduleC writes tenant C's rows, due now, while it is paused.
func scheduleC(ctx context.Context, l *ledger.Ledger, n int) error {
	now := time.Now()
	for i := 0; i < n; i += ledger.MaxScheduleBatch {
		var batch []ledger.NewNotification
		for j := i; j < min(n, i+ledger.MaxScheduleBatch); j++ {
			batch = append(batch, ledger.NewNotification{Recipient: fmt.Sprintf("c%d", j), Channel: "sms", Kind: "reminder",
				RefID: fmt.Sprintf("paused-%d", j), DueAt: now, Payload: []byte(`{"text":"hello"}`)})
		}
		if _, err := l.Schedule(ctx, tenantC, batch); err != nil {
			return err
		}
	}
	return nil
}

// waitAB polls, as the owner, until every row of A and B is settled.
func waitAB(ctx context.Context, db *benchutil.DB, deadline time.Time) error {
	for {
		var owed, total int64
		if err := db.Owner.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE settled_at IS NULL), count(*)
		      FROM owed_notifications WHERE tenant_id IN ($1, $2)`, tenantA, tenantB).Scan(&owed, &total); err != nil {
			return err
		}
		if owed == 0 && total > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of tenant A's and B's rows still owed at the deadline", owed)
		}
		time.Sleep(time.Second)
	}
}

type lag struct {
	n, expired int
	p50, p99   float64
}

type result struct {
	b                                map[string]lag
	drainA, firstA, rateAfterWritten float64
	leasedC                          int
}

// measure reads the outcome from the ledger, as the owner; written is when
// A's last rows were posted.
func measure(ctx context.Context, db *benchutil.DB, start, written time.Time) (result, error) {
	r := result{b: map[string]lag{}}
	rows, err := db.Owner.QueryContext(ctx, `
SELECT channel, count(*), count(*) FILTER (WHERE state = 'expired'),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM delivered_at - due_at)) * 1000, 0),
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM delivered_at - due_at)) * 1000, 0)
  FROM owed_notifications WHERE tenant_id = $1 GROUP BY channel`, tenantB)
	if err != nil {
		return r, err
	}
	for rows.Next() {
		var ch string
		var l lag
		if err := rows.Scan(&ch, &l.n, &l.expired, &l.p50, &l.p99); err != nil {
			rows.Close()
			return r, err
		}
		r.b[ch] = l
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return r, err
	}
	var first, last time.Time
	if err := db.Owner.QueryRowContext(ctx, `SELECT min(delivered_at), max(delivered_at) FROM owed_notifications
	    WHERE tenant_id = $1`, tenantA).Scan(&first, &last); err != nil {
		return r, err
	}
	r.drainA, r.firstA = last.Sub(start).Seconds(), first.Sub(start).Seconds()
	var after int
	if err := db.Owner.QueryRowContext(ctx, `SELECT count(*) FROM owed_notifications
	    WHERE tenant_id = $1 AND delivered_at > $2`, tenantA, written).Scan(&after); err != nil {
		return r, err
	}
	if d := last.Sub(written).Seconds(); d > 0 {
		r.rateAfterWritten = float64(after) / d
	}
	err = db.Owner.QueryRowContext(ctx, `SELECT count(*) FROM owed_notifications
	    WHERE tenant_id = $1 AND (state <> 'pending' OR published_at IS NOT NULL)`, tenantC).Scan(&r.leasedC)
	return r, err
}
