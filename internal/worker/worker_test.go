package worker_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/resolve"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/sweep"
	"github.com/owedhq/owed/internal/tenant"
	"github.com/owedhq/owed/internal/worker"
)

var bg = context.Background()

type bundle struct {
	*stacktest.Stack
	sweeper *sweep.Sweeper
}

// setup starts a parallel test's stack.
func setup(t *testing.T, o stacktest.Options) *bundle {
	t.Helper()
	t.Parallel()
	return newBundle(t, o)
}

// newBundle is setup for a benchmark, which cannot run in parallel.
func newBundle(tb testing.TB, o stacktest.Options) *bundle {
	tb.Helper()
	s := stacktest.New(tb, o)
	sw, err := sweep.New(s.Ledger, s.Queue, sweep.Config{Batch: 500, Budget: 30 * time.Second, ProviderRate: testSweepRate,
		PublishAhead: time.Minute, RequeueAfter: 10 * time.Minute, KeyPrefix: "owed-"}, zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	return &bundle{Stack: s, sweeper: sw}
}

// sweepAll runs sweeps until one leases nothing.
// testSweepRate paces the tests' sweeps so fast that an account's cap
// (its pace × the queue depth) never holds rows back: these tests are of
// the worker, and publish what they schedule at once.
var testSweepRate = pace.Rate{Count: 1_000_000, Per: time.Second}

func (b *bundle) sweepAll(tb testing.TB) int {
	tb.Helper()
	total := 0
	for {
		res := read(tb, b.sweeper.Run)
		if res.Leased == 0 {
			return total
		}
		total += res.Published
	}
}

// sweepLater runs one sweep as if d had passed: the rows a worker handed
// back to the ledger until a not-before time within d are published again,
// as the cron's sweep would when that time comes.
func (b *bundle) sweepLater(tb testing.TB, d time.Duration) sweep.Result {
	tb.Helper()
	clk := clock.Offset(d)
	sw, err := sweep.New(ledger.New(b.DB.App, clk), b.Queue, sweep.Config{Batch: 500, Budget: 30 * time.Second, ProviderRate: testSweepRate,
		PublishAhead: time.Minute, RequeueAfter: 10 * time.Minute, KeyPrefix: "owed-"}, zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	return read(tb, sw.Run)
}

type options func(*worker.Options)

// newWorker returns a worker with the tests' settings, changed by change.
func (b *bundle) newWorker(tb testing.TB, change ...options) *worker.Worker {
	tb.Helper()
	o := worker.Options{
		Ledger: b.Ledger, Queue: b.Queue,
		Route:             func(string) (provider.Sender, error) { return b.Sender, nil },
		Pace:              func(string) worker.Pacer { return stacktest.Unpaced{} },
		Log:               zerolog.Nop(),
		Concurrency:       8,
		VisibilityTimeout: 5 * time.Second,
		SendTimeout:       2 * time.Second,
		ShutdownTimeout:   10 * time.Second,
	}
	for _, c := range change {
		c(&o)
	}
	w, err := worker.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// start starts a newWorker. The returned stop shuts it down and waits for
// it (calling it again is harmless); the worker is stopped when the test
// ends.
func (b *bundle) start(tb testing.TB, change ...options) (stop func()) {
	tb.Helper()
	w := b.newWorker(tb, change...)
	if err := w.Start(bg); err != nil {
		tb.Fatal(err)
	}
	stop = func() {
		stopped := make(chan struct{})
		go func() { w.Stop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			tb.Error("worker did not stop within 30s")
		}
	}
	tb.Cleanup(stop)
	return stop
}

// waitSettled polls the ledger until nothing is owed.
func (b *bundle) waitSettled(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		bl := read(t, b.Ledger.Backlog)
		if bl.Owed == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still owed after %s: %+v", timeout, bl.ByState)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *bundle) sandboxStats(t *testing.T) sandbox.Stats {
	t.Helper()
	return read(t, b.SandboxClient.Stats)
}

func (b *bundle) queueStats(t *testing.T) queue.Stats { t.Helper(); return read(t, b.Queue.Stats) }

// read calls f, failing the test if it cannot answer.
func read[T any](tb testing.TB, f func(context.Context) (T, error)) T {
	tb.Helper()
	v, err := f(bg)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// A Worker runs once: a second Start or Run is refused at once rather than
// racing the first for its batchers, and Stop is safe before Start and
// twice.
func TestWorkerStartsOnceAndStopsTwice(t *testing.T) {
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", 5, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	w := b.newWorker(t)
	w.Stop() // before Start: nothing to stop
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	runs := make(chan error, 2)
	for range 2 {
		go func() { runs <- w.Run(ctx) }()
	}
	// The Run that started cannot return before Stop, so the first answer
	// is the refused one.
	if err := <-runs; !errors.Is(err, worker.ErrStarted) {
		t.Fatalf("one of two concurrent Runs returned %v, want ErrStarted", err)
	}
	if err := w.Start(ctx); !errors.Is(err, worker.ErrStarted) {
		t.Errorf("Start on a running worker returned %v, want ErrStarted", err)
	}
	b.waitSettled(t, 30*time.Second)
	w.Stop()
	w.Stop()
	if err := <-runs; err != nil {
		t.Errorf("the running Run returned %v after Stop, want nil", err)
	}
	if st := b.sandboxStats(t); st.Accepted != 5 || st.Duplicates != 0 {
		t.Errorf("sandbox accepted=%d duplicates=%d, want 5 and 0", st.Accepted, st.Duplicates)
	}
	if err := w.Start(ctx); !errors.Is(err, worker.ErrStarted) {
		t.Errorf("Start on a stopped worker returned %v, want ErrStarted", err)
	}
}

func TestThousandRowsDeliveredExactlyOnce(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 1000, time.Now().Add(-time.Minute), nil)
	if n := b.sweepAll(t); n != 1000 {
		t.Fatalf("published %d, want 1000", n)
	}
	b.start(t)
	b.waitSettled(t, 60*time.Second)

	st := b.sandboxStats(t)
	if st.Accepted != 1000 || st.Duplicates != 0 || st.DistinctKeys != 1000 {
		t.Errorf("sandbox: accepted=%d duplicates=%d distinct=%d, want 1000/0/1000", st.Accepted, st.Duplicates, st.DistinctKeys)
	}
	for _, r := range rows[:20] {
		d, err := b.Ledger.Get(bg, "acme", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != ledger.StateDelivered || d.DeliveredAt == nil || d.ProviderMessageID == "" || len(d.History) != 1 {
			t.Errorf("row %d: state=%s delivered=%v msg=%q attempts=%d", r.ID, d.State, d.DeliveredAt, d.ProviderMessageID, len(d.History))
		}
		sends, err := b.SandboxClient.Sends(bg, sandbox.SendQuery{Key: ledger.IdempotencyKey("owed-", r.ID, d.DueAt)})
		if err != nil || len(sends) != 1 || sends[0].MessageID != d.ProviderMessageID {
			t.Errorf("row %d: sandbox sends %+v (err %v), want one with message id %q", r.ID, sends, err, d.ProviderMessageID)
		}
	}
	if q := b.queueStats(t); q.Visible+q.InFlight+q.Delayed+q.DeadLetterDepth != 0 {
		t.Errorf("queue not drained: %+v", q)
	}
}

func TestDuplicateQueueDeliveryIsAbsorbed(t *testing.T) {
	b := setup(t, stacktest.Options{Emulator: func(c *emulator.Config) { c.RedeliveryRate = 0.5 }})
	b.Schedule(t, "acme", 200, time.Now().Add(-time.Minute), nil)
	b.sweepAll(t)
	b.start(t)
	b.waitSettled(t, 60*time.Second)
	// Let redelivered copies drain, then count.
	deadline := time.Now().Add(20 * time.Second)
	for q := b.queueStats(t); q.Visible+q.InFlight+q.Delayed > 0 && time.Now().Before(deadline); q = b.queueStats(t) {
		time.Sleep(50 * time.Millisecond)
	}
	st := b.sandboxStats(t)
	if st.Accepted != 200 || st.Duplicates != 0 {
		t.Errorf("sandbox accepted=%d duplicates=%d, want 200 and 0", st.Accepted, st.Duplicates)
	}
}

func TestExpiredRowIsNeverSent(t *testing.T) {
	b := setup(t, stacktest.Options{})
	now := time.Now()
	// Well inside the hour the worker is ahead, so the row is still owed
	// for the sweep however long the setup takes.
	exp := now.Add(30 * time.Minute)
	rows := b.Schedule(t, "acme", 2, now.Add(-time.Second), func(i int, r *ledger.NewNotification) {
		if i == 0 {
			r.ExpiresAt = &exp
		}
	})
	b.sweepAll(t)
	// The row expires while its message sits in the queue: an hour passes
	// for the ledger and the worker alike.
	ahead := clock.Offset(time.Hour)
	b.Ledger = ledger.New(b.DB.App, ahead)
	b.start(t, func(o *worker.Options) { o.Clock = ahead })
	b.waitSettled(t, 30*time.Second)
	d, _ := b.Ledger.Get(bg, "acme", rows[0].ID)
	if d.State != ledger.StateExpired || len(d.History) != 0 {
		t.Errorf("expired row: state=%s attempts=%d, want expired and none", d.State, len(d.History))
	}
	if st := b.sandboxStats(t); st.Accepted != 1 {
		t.Errorf("sandbox accepted %d, want only the unexpired row", st.Accepted)
	}
}

// setupDeadWorkerClaim schedules one row whose message a worker took and
// whose row it claimed before dying: the claim has a short lease and the
// message is never acked.
func setupDeadWorkerClaim(t *testing.T) (*bundle, []ledger.Scheduled) {
	t.Helper()
	b := setup(t, stacktest.Options{})
	due := time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond)
	rows := b.Schedule(t, "acme", 1, due, nil)
	b.sweepAll(t)
	// A worker took the message and claimed the row, then died: its claim
	// has a short lease and its message is never acked.
	msgs, err := b.Queue.Consume(bg, rest.ConsumeOptions{MaxMessages: 1, VisibilityTimeout: time.Second})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("consume: %v %d", err, len(msgs))
	}
	if c, err := b.Ledger.ClaimForSend(bg, "acme", rows[0].ID, ledger.ClaimParams{DueAt: due, LeaseFor: time.Millisecond}); err != nil || c.Outcome != ledger.ClaimSend {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	return b, rows
}

func TestWorkerDiedMidSendIsRecoveredAndCounted(t *testing.T) {
	b, rows := setupDeadWorkerClaim(t)
	b.start(t)
	b.waitSettled(t, 30*time.Second)
	d, _ := b.Ledger.Get(bg, "acme", rows[0].ID)
	if d.State != ledger.StateDelivered || len(d.History) != 1 || !d.History[0].PossibleDuplicate {
		t.Errorf("recovered row: state=%s history=%+v, want delivered with one attempt flagged possible duplicate", d.State, d.History)
	}
}

func TestRateLimitStormBurnsNoAttempt(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 20, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	// Every send is refused with 429 Retry-After: 1 from now, when the rows
	// are queued, until the worker has been refused and paused its pace.
	if err := b.SandboxClient.SetFaults(bg, sandbox.Faults{StormSeconds: 3600, StormRetryAfterSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	var paused atomic.Int64
	b.start(t, func(o *worker.Options) {
		o.Pace = func(string) worker.Pacer { return countingPacer{&paused} }
	})
	for deadline := time.Now().Add(30 * time.Second); paused.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no 429 paused the pace within 30 s of the storm: sandbox %+v", b.sandboxStats(t))
		}
	}
	if err := b.SandboxClient.SetFaults(bg, sandbox.Faults{}); err != nil {
		t.Fatal(err)
	}
	b.waitSettled(t, 60*time.Second)
	if st := b.sandboxStats(t); st.Faults[sandbox.FaultStorm] == 0 || st.Accepted != 20 || st.Duplicates != 0 {
		t.Errorf("sandbox: storms=%d accepted=%d duplicates=%d; want storms > 0, 20 accepted, 0 duplicates",
			st.Faults[sandbox.FaultStorm], st.Accepted, st.Duplicates)
	}
	for _, r := range rows {
		d, _ := b.Ledger.Get(bg, "acme", r.ID)
		if d.State != ledger.StateDelivered || d.Attempts != 1 {
			t.Errorf("row %d: state=%s attempts=%d, want delivered with exactly 1 attempt", r.ID, d.State, d.Attempts)
		}
	}
	if q := b.queueStats(t); q.DeadLetterDepth != 0 {
		t.Errorf("dead letters: %d, want 0", q.DeadLetterDepth)
	}
}

type countingPacer struct{ n *atomic.Int64 }

func (countingPacer) Reserve(context.Context, time.Duration) (time.Duration, bool, error) {
	return 0, true, nil
}
func (p countingPacer) Pause(context.Context, time.Duration) error               { p.n.Add(1); return nil }
func (countingPacer) Next(context.Context) (time.Duration, time.Duration, error) { return 0, 0, nil }

func TestPermanentFailureAndPoisonAreDeadLettered(t *testing.T) {
	b := setup(t, stacktest.Options{Sandbox: func(c *sandbox.Config) { c.Faults.PermanentRecipient = "bounce" }})
	rows := b.Schedule(t, "acme", 3, time.Now().Add(-time.Second), func(i int, r *ledger.NewNotification) {
		if i == 0 {
			r.Recipient = "bounce@example.com"
		}
	})
	b.sweepAll(t)
	// A malformed message and one naming a row of another tenant.
	poison := []rest.Entry{
		{Payload: json.RawMessage(`{"hello":"world"}`), IdempotencyKey: "poison-1"},
		{Payload: json.RawMessage(`{"v":1,"tenant_id":"mallory","id":` + itoa(rows[1].ID) + `,"due_at":"2026-01-01T00:00:00Z","key":"k"}`), IdempotencyKey: "poison-2"},
	}
	if _, err := b.Queue.PublishBatch(bg, poison); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	b.waitSettled(t, 30*time.Second)
	d, _ := b.Ledger.Get(bg, "acme", rows[0].ID)
	if d.State != ledger.StateFailed || d.DeliveredAt != nil || len(d.History) != 1 || d.History[0].Outcome != ledger.AttemptPermanent {
		t.Errorf("bounced row: state=%s history=%+v", d.State, d.History)
	}
	for _, r := range rows[1:] {
		if d, _ := b.Ledger.Get(bg, "acme", r.ID); d.State != ledger.StateDelivered {
			t.Errorf("row %d is %s, want delivered (the worker went on)", r.ID, d.State)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.queueStats(t).DeadLetterDepth < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if q := b.queueStats(t); q.DeadLetterDepth != 3 {
		t.Errorf("dead letters: %d, want 3 (bounce, malformed, cross-tenant)", q.DeadLetterDepth)
	}
}

func TestShutdownDrainsCleanly(t *testing.T) {
	b := setup(t, stacktest.Options{Sandbox: func(c *sandbox.Config) {
		// Slow sends: the shutdown arrives while some are in flight.
		c.Faults.TimeoutRate, c.Faults.TimeoutSeconds = 0.2, 0.3
	}})
	retryFast := func(o *worker.Options) { o.RetryBase = 50 * time.Millisecond }
	b.Schedule(t, "acme", 300, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	// The first worker hides what it receives for an hour: a message it
	// abandoned at shutdown instead of acking or returning it would stay
	// hidden past the second worker's deadline below. (A message returned
	// after a retry delay stays in flight until the delay passes, as on SQS.)
	stop := b.start(t, retryFast, func(o *worker.Options) { o.VisibilityTimeout = time.Hour })
	deadline := time.Now().Add(20 * time.Second)
	for b.sandboxStats(t).Accepted < 50 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	// Nothing is left claimed: every row is delivered or back in the queue's hands.
	if bl := read(t, b.Ledger.Backlog); bl.ByState[ledger.StateSending] != 0 {
		t.Errorf("%d rows left in sending after a clean shutdown", bl.ByState[ledger.StateSending])
	}
	// Nothing is left in flight: what the worker held is acked, visible
	// again, or back within its retry delay (under a second here), never
	// hidden for the hour it was received for.
	waitNotInFlight(t, b)
	// A new worker finishes the job without duplicates.
	if err := b.SandboxClient.SetFaults(bg, sandbox.Faults{}); err != nil {
		t.Fatal(err)
	}
	b.start(t, retryFast)
	b.waitSettled(t, 60*time.Second)
	if st := b.sandboxStats(t); st.Accepted != 300 || st.Duplicates != 0 {
		t.Errorf("after restart: accepted=%d duplicates=%d, want 300 and 0", st.Accepted, st.Duplicates)
	}
}

// waitNotInFlight polls the queue until no message is in flight, failing
// the test if one still is after 20 s.
func waitNotInFlight(t *testing.T, b *bundle) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		q := b.queueStats(t)
		if q.InFlight == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages still in flight 20s after a clean shutdown: %+v", q.InFlight, q)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// process opens a pool of its own as the application role, standing in
// for another worker process, and returns its ledger and its paces at rate.
func (b *bundle) process(t *testing.T, rate string) (*ledger.Ledger, func(string) worker.Pacer) {
	t.Helper()
	db, err := sql.Open("postgres", b.DB.AppURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	r, err := pace.ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.New(db, nil), worker.Paces(db, r)
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// Two worker processes (separate pools, separate Worker values) share one
// provider account's pace through Postgres: together they stay under the
// sandbox's limit, so it never has to refuse them.
//
// The pace hands out slots an interval apart, but a send leaves when its
// sender goroutine runs, which on a loaded machine may be late; late sends
// then reach the provider together. Only a send that holds a slot can be
// late, and each of the two processes' senders holds at most one, so the
// sandbox's burst allows one late send per sender on top of the send due
// now. A pace that was not shared would still outrun it: two processes
// each sending at the rate send twice it.
func TestTwoProcessesShareTheProvidersPace(t *testing.T) {
	const perSecond, senders = 10, 2
	b := setup(t, stacktest.Options{Sandbox: func(c *sandbox.Config) {
		c.Rate, _ = pace.ParseRate("10/s")
		c.Burst = 2*senders + 1
	}})
	const rows = 60
	b.Schedule(t, "acme", rows, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	start := time.Now()
	for i := 0; i < 2; i++ {
		l, paces := b.process(t, "10/s")
		b.start(t, func(o *worker.Options) { o.Ledger, o.Pace, o.Concurrency = l, paces, senders })
	}
	b.waitSettled(t, 60*time.Second)
	elapsed := time.Since(start)
	st := b.sandboxStats(t)
	if st.Accepted != rows || st.Duplicates != 0 {
		t.Errorf("sandbox: accepted=%d duplicates=%d, want %d and 0", st.Accepted, st.Duplicates, rows)
	}
	if st.RateLimited != 0 {
		t.Errorf("the sandbox refused %d sends with 429: the two processes exceeded the shared pace", st.RateLimited)
	}
	// The pace has no burst: the first slot starts no earlier than the
	// first reservation and each later one an interval after the last, so
	// 60 sends at 10/s cannot take less than 59 intervals.
	if min := time.Duration(rows-1) * time.Second / perSecond; elapsed < min {
		t.Errorf("60 paced sends took %s, faster than the rate allows (%s)", elapsed, min)
	}
}

func TestContactsResolveSkipOrFail(t *testing.T) {
	b := setup(t, stacktest.Options{})
	if err := tenant.InTx(bg, b.DB.Owner, "acme", func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_contacts (tenant_id, recipient, channel, address, opted_out) VALUES
		    ('acme', 'r0', 'sms', '+15550100', false), ('acme', 'r1', 'sms', '+15550101', true)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rows := b.Schedule(t, "acme", 3, time.Now().Add(-time.Second), nil) // r2 has no contact
	b.sweepAll(t)
	b.start(t, func(o *worker.Options) {
		o.Resolver, o.RetryBase, o.MaxAttempts = resolve.NewSQL(b.DB.App), 20*time.Millisecond, 3
	})
	b.waitSettled(t, 30*time.Second)
	want := []ledger.State{ledger.StateDelivered, ledger.StateSkipped, ledger.StateFailed}
	for i, r := range rows {
		d, _ := b.Ledger.Get(bg, "acme", r.ID)
		if d.State != want[i] {
			t.Errorf("row for r%d: %s (%s), want %s", i, d.State, d.LastError, want[i])
		}
	}
	sends, err := b.SandboxClient.Sends(bg, sandbox.SendQuery{})
	if err != nil || len(sends) != 1 || sends[0].Recipient != "+15550100" {
		t.Errorf("sandbox sends: %+v (%v), want one to the resolved address +15550100", sends, err)
	}
	if d, _ := b.Ledger.Get(bg, "acme", rows[2].ID); len(d.History) != 3 {
		t.Errorf("unresolvable recipient: %d attempts recorded, want 3 (OWED_MAX_ATTEMPTS)", len(d.History))
	}
}

// A row published ahead surfaces up to a second before it is due; the
// worker holds its claim and sends at the due time, never before.
func TestPublishedAheadIsNeverSentEarly(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 5, time.Now().Add(1500*time.Millisecond), nil)
	if n := b.sweepAll(t); n != 5 {
		t.Fatalf("published %d, want 5 (within the publish-ahead window)", n)
	}
	b.start(t)
	b.waitSettled(t, 30*time.Second)
	for _, r := range rows {
		d, _ := b.Ledger.Get(bg, "acme", r.ID)
		if d.State != ledger.StateDelivered || len(d.History) != 1 {
			t.Fatalf("row %d: %s with %d attempts", r.ID, d.State, len(d.History))
		}
		if d.History[0].StartedAt.Before(d.DueAt) {
			t.Errorf("row %d sent at %s, before its due time %s", r.ID, d.History[0].StartedAt, d.DueAt)
		}
	}
}

// expiringPacer grants every slot wait away, and is a clock that jumps an
// hour ahead halfway through the first such wait: a row claimed before its
// expiry expires while it waits for the provider's pace, however long the
// setup before the claim took.
type expiringPacer struct {
	wait time.Duration
	mu   sync.Mutex
	// jumpAt is zero until the first reservation.
	jumpAt time.Time
}

func (p *expiringPacer) Reserve(context.Context, time.Duration) (time.Duration, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.jumpAt.IsZero() {
		p.jumpAt = time.Now().Add(p.wait / 2)
	}
	return p.wait, true, nil
}
func (*expiringPacer) Pause(context.Context, time.Duration) error                 { return nil }
func (*expiringPacer) Next(context.Context) (time.Duration, time.Duration, error) { return 0, 0, nil }

func (p *expiringPacer) Now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if !p.jumpAt.IsZero() && !now.Before(p.jumpAt) {
		now = now.Add(time.Hour)
	}
	return now.UTC().Truncate(time.Microsecond)
}

func (p *expiringPacer) NowOrNil() *time.Time { now := p.Now(); return &now }

func (p *expiringPacer) reserved() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.jumpAt.IsZero()
}

// A row claimed before its expiry that waits past it for the provider's pace
// is settled expired, not sent late.
func TestRowExpiringWhileWaitingForThePaceIsNotSent(t *testing.T) {
	b := setup(t, stacktest.Options{})
	exp := time.Now().Add(30 * time.Minute)
	rows := b.Schedule(t, "acme", 1, time.Now().Add(-100*time.Millisecond), func(_ int, r *ledger.NewNotification) {
		r.ExpiresAt = &exp
	})
	b.sweepAll(t)
	p := &expiringPacer{wait: time.Second}
	b.Ledger = ledger.New(b.DB.App, p)
	b.start(t, func(o *worker.Options) {
		o.Clock, o.Pace = p, func(string) worker.Pacer { return p }
	})
	b.waitSettled(t, 30*time.Second)
	if !p.reserved() {
		t.Fatal("the row never reserved a slot: it expired before it was claimed, not while waiting for the pace")
	}
	if d, _ := b.Ledger.Get(bg, "acme", rows[0].ID); d.State != ledger.StateExpired || len(d.History) != 0 {
		t.Errorf("row: %s with %d attempts, want expired and never sent", d.State, len(d.History))
	}
	if st := b.sandboxStats(t); st.Accepted != 0 {
		t.Errorf("the sandbox accepted %d sends, want none", st.Accepted)
	}
}

// lostAnswer sends through the sandbox but reports its first send as timed
// out: the provider accepted it, the worker never heard.
type lostAnswer struct {
	provider.Sender
	lost atomic.Bool
}

func (s *lostAnswer) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	res, err := s.Sender.Send(ctx, d)
	if err == nil && !s.lost.Swap(true) {
		return provider.Result{}, provider.TransportError(s.Name(), context.DeadlineExceeded)
	}
	return res, err
}

// startLosingFirstAnswer schedules one due row and starts a worker, changed
// by change, whose sender loses the provider's first answer. It returns the
// row's id.
func (b *bundle) startLosingFirstAnswer(t *testing.T, change options) int64 {
	t.Helper()
	rows := b.Schedule(t, "acme", 1, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	sender := &lostAnswer{Sender: b.Sender}
	b.start(t, func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return sender, nil }
	}, change)
	return rows[0].ID
}

// When a send's answer is lost the worker cannot know whether the provider
// took it; the retry is recorded as a possible duplicate, never silently.
func TestLostAnswerRetryIsRecordedAsPossibleDuplicate(t *testing.T) {
	b := setup(t, stacktest.Options{})
	id := b.startLosingFirstAnswer(t, func(o *worker.Options) { o.RetryBase = 20 * time.Millisecond })
	b.waitSettled(t, 30*time.Second)
	d, _ := b.Ledger.Get(bg, "acme", id)
	if d.State != ledger.StateDelivered || len(d.History) != 2 || !d.History[1].PossibleDuplicate {
		t.Errorf("row: %s history %+v, want delivered on a second attempt flagged possible duplicate", d.State, d.History)
	}
	if st := b.sandboxStats(t); st.Duplicates != 1 {
		t.Errorf("sandbox duplicates %d, want 1 (the provider did take the first send)", st.Duplicates)
	}
}

// refuseOncePacer has no slot for the first reservation, then always one.
type refuseOncePacer struct{ refused *atomic.Bool }

func (p refuseOncePacer) Reserve(context.Context, time.Duration) (time.Duration, bool, error) {
	if !p.refused.Swap(true) {
		return 200 * time.Millisecond, false, nil
	}
	return 0, true, nil
}
func (refuseOncePacer) Pause(context.Context, time.Duration) error                 { return nil }
func (refuseOncePacer) Next(context.Context) (time.Duration, time.Duration, error) { return 0, 0, nil }

// A row a dead worker may already have sent is re-claimed with its mark; if
// that claim is handed back before sending (the pace has no slot), the mark
// must survive the release, so the send that finally happens is still
// recorded as a possible duplicate.
func TestPossibleDuplicateMarkSurvivesARelease(t *testing.T) {
	b, rows := setupDeadWorkerClaim(t)
	var refused atomic.Bool
	b.start(t, func(o *worker.Options) {
		o.Pace = func(string) worker.Pacer { return refuseOncePacer{&refused} }
	})
	b.waitSettled(t, 30*time.Second)
	if !refused.Load() {
		t.Fatal("the pace never refused a slot: the release path was not exercised")
	}
	d, _ := b.Ledger.Get(bg, "acme", rows[0].ID)
	if d.State != ledger.StateDelivered || len(d.History) != 1 || !d.History[0].PossibleDuplicate {
		t.Errorf("row: state=%s history=%+v, want delivered with its one attempt flagged possible duplicate", d.State, d.History)
	}
}
