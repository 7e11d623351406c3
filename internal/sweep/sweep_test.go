package sweep

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/stacktest"
)

var bg = context.Background()

type bundle struct {
	*stacktest.Stack
	sw  *Sweeper
	clk *clock.Stub
}

// testConfig's one account is paced fast enough that its cap is
// MaxOutstanding: a test about something else is never held back.
var testConfig = Config{Batch: 100, Budget: 30 * time.Second, PublishAhead: time.Minute,
	RequeueAfter: 10 * time.Minute, RequeueBatch: 50, MaxOutstanding: 100000, QueueDepth: 2 * time.Second,
	ProviderRate: pace.Rate{Count: 100000, Per: time.Second}, KeyPrefix: "owed-"}

func setup(t *testing.T, o stacktest.Options) *bundle {
	t.Helper()
	return setupWith(t, o, testConfig, nil)
}

// setupWith is setup with a sweep configuration of the test's own and,
// when wrap is not nil, the queue the sweeper publishes to wrapped by it.
func setupWith(t *testing.T, o stacktest.Options, cfg Config, wrap func(Publisher) Publisher) *bundle {
	t.Helper()
	t.Parallel()
	s := stacktest.New(t, o)
	b := &bundle{Stack: s, clk: clock.NewStub(time.Now().Truncate(time.Second))}
	s.Ledger = ledger.New(s.DB.App, b.clk)
	var q Publisher = s.Queue
	if wrap != nil {
		q = wrap(q)
	}
	sw, err := New(s.Ledger, q, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	b.sw = sw
	return b
}

func (b *bundle) run(t *testing.T) Result {
	t.Helper()
	res, err := b.sw.Run(bg)
	if err != nil {
		t.Fatalf("sweep: %v (%+v)", err, res)
	}
	return res
}

// consumeAll drains visible messages and returns their envelopes.
func (b *bundle) consumeAll(t *testing.T) []envelope.Envelope {
	t.Helper()
	var out []envelope.Envelope
	for {
		msgs, err := b.Queue.Consume(bg, rest.ConsumeOptions{MaxMessages: 10, VisibilityTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return out
		}
		for _, m := range msgs {
			e, err := envelope.Decode(m.Payload)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
	}
}

func TestMissedHourIsRecoveredOldestFirstInBoundedSlices(t *testing.T) {
	b := setup(t, stacktest.Options{})
	// An hour of rows fell due while no sweep ran: 250 rows over 60 minutes.
	start := b.clk.Now().Add(-time.Hour)
	rows := b.Schedule(t, "acme", 250, b.clk.Now(), func(i int, r *ledger.NewNotification) {
		r.DueAt = start.Add(time.Duration(i) * 14 * time.Second)
	})
	due := map[int64]time.Time{}
	for i, r := range rows {
		due[r.ID] = start.Add(time.Duration(i) * 14 * time.Second)
	}
	var order []int64
	b.sw.afterPublish = func(ids []int64) error { order = append(order, ids...); return nil }
	// One run takes the whole backlog, in slices of at most the batch.
	res := b.run(t)
	if res.Leased != 250 || res.Published != 250 || res.Slices != 3 || res.HeldBack != "" {
		t.Errorf("run: %+v, want 250 leased and published in 3 slices of at most %d", res, testConfig.Batch)
	}
	if res.OldestOwedAgeS < 3000 {
		t.Errorf("the run saw oldest owed age %.0fs, want about an hour", res.OldestOwedAgeS)
	}
	// Oldest first across the slices: every row is published after every
	// row due before it.
	if len(order) != 250 {
		t.Fatalf("%d rows published, want 250", len(order))
	}
	for i := 1; i < len(order); i++ {
		if due[order[i]].Before(due[order[i-1]]) {
			t.Fatalf("row %d (due %s) published after row %d (due %s)", order[i-1], due[order[i-1]], order[i], due[order[i]])
		}
	}
	if got := b.consumeAll(t); len(got) != 250 {
		t.Errorf("queue holds %d messages, want 250", len(got))
	}
	if res := b.run(t); res.Leased != 0 || res.Slices != 0 || res.Outstanding != 250 {
		t.Errorf("second run: %+v, want nothing leased and the 250 queued rows outstanding", res)
	}
}

func TestExpiredRowIsSettledNotPublished(t *testing.T) {
	b := setup(t, stacktest.Options{})
	exp := b.clk.Now().Add(-time.Minute)
	b.Schedule(t, "acme", 3, b.clk.Now().Add(-10*time.Minute), func(i int, r *ledger.NewNotification) {
		if i == 0 {
			r.ExpiresAt = &exp
		}
	})
	res := b.run(t)
	if res.Expired != 1 || res.Published != 2 {
		t.Errorf("run: expired=%d published=%d, want 1 and 2", res.Expired, res.Published)
	}
	for _, e := range b.consumeAll(t) {
		d, _ := b.Ledger.Get(bg, "acme", e.ID)
		if d.State == ledger.StateExpired {
			t.Errorf("an expired row (%d) was published", e.ID)
		}
	}
}

func TestPublishAheadDelaysUntilDue(t *testing.T) {
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", 1, b.clk.Now().Add(30*time.Second), nil)
	b.Schedule(t, "other", 1, b.clk.Now().Add(5*time.Minute), nil)
	res := b.run(t)
	if res.Published != 1 {
		t.Fatalf("published %d, want only the row due within the publish-ahead window", res.Published)
	}
	st, _ := b.Queue.Stats(bg)
	if st.Delayed != 1 || st.Visible != 0 {
		t.Errorf("queue: %+v, want the message delayed until its due second", st)
	}
}

func TestConcurrentSweepsNeverLeaseTheSameRow(t *testing.T) {
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", 1000, b.clk.Now().Add(-time.Minute), nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := b.sw.Run(bg)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total += res.Leased
				mu.Unlock()
				if res.Leased == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if total != 1000 {
		t.Errorf("4 concurrent sweepers leased %d rows in all, want exactly 1000", total)
	}
	got := b.consumeAll(t)
	seen := map[int64]bool{}
	for _, e := range got {
		if seen[e.ID] {
			t.Errorf("row %d published twice", e.ID)
		}
		seen[e.ID] = true
	}
	if len(seen) != 1000 {
		t.Errorf("%d distinct rows published, want 1000", len(seen))
	}
}

func TestQueueDownFailsTheRunAndRowsHeal(t *testing.T) {
	b := setup(t, stacktest.Options{Emulator: func(c *emulator.Config) {
		c.Faults.ThrottleRate, c.Faults.ThrottleStatus = 1, 503
	}})
	b.Schedule(t, "acme", 20, b.clk.Now().Add(-time.Minute), nil)
	ctx, cancel := context.WithTimeout(bg, 3*time.Second)
	defer cancel()
	res, err := b.sw.Run(ctx)
	if err == nil || res.Complete || res.Published != 0 {
		t.Fatalf("run with the queue down: err=%v %+v, want an incomplete run that published nothing", err, res)
	}
	if res.Released != 20 {
		t.Errorf("released %d, want all 20 leased rows handed back", res.Released)
	}
	bl, _ := b.Ledger.Backlog(bg)
	if bl.ByState[ledger.StatePending] != 20 {
		t.Errorf("backlog after the failed run: %+v, want 20 pending", bl.ByState)
	}
	// The queue comes back; the next run publishes everything.
	if err := b.Emulator.SetFaults(emulator.Faults{ThrottleStatus: 429, ThrottleScope: emulator.ScopePublish, RetryAfterSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	if res := b.run(t); res.Published != 20 {
		t.Errorf("after recovery published %d, want 20", res.Published)
	}
}

func TestLostQueuedMarkHealsWithoutASecondMessage(t *testing.T) {
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", 10, b.clk.Now().Add(-time.Minute), nil)
	// The queue accepts the batch, then the sweeper dies before marking.
	b.sw.afterPublish = func([]int64) error { return errors.New("killed before the queued mark") }
	if _, err := b.sw.Run(bg); err == nil {
		t.Fatal("want the injected failure")
	}
	b.sw.afterPublish = nil
	bl, _ := b.Ledger.Backlog(bg)
	if bl.ByState[ledger.StateQueued] != 0 {
		t.Fatalf("rows marked queued despite the lost mark: %+v", bl.ByState)
	}
	// Next minute: the rows are leased again and republished under the same
	// keys; the queue recognises every one.
	b.clk.Advance(time.Minute)
	res := b.run(t)
	if res.Published != 10 || res.Deduplicated != 10 {
		t.Errorf("healing run: published=%d deduplicated=%d, want 10 and 10", res.Published, res.Deduplicated)
	}
	if got := b.consumeAll(t); len(got) != 10 {
		t.Errorf("queue holds %d messages, want 10 (one per row)", len(got))
	}
	bl, _ = b.Ledger.Backlog(bg)
	if bl.ByState[ledger.StateQueued] != 10 {
		t.Errorf("after healing: %+v, want 10 queued", bl.ByState)
	}
}

func TestQueuedRowIsRepublishedAfterRequeueAfter(t *testing.T) {
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", 5, b.clk.Now().Add(-time.Minute), nil)
	b.run(t)
	b.clk.Advance(testConfig.RequeueAfter + time.Minute)
	res := b.run(t)
	if res.Leased != 5 || res.Republished != 5 || res.Deduplicated != 0 {
		t.Errorf("requeue run: %+v, want 5 leased and republished under new queue keys, none deduplicated", res)
	}
}

func TestStalledSweepIsReported(t *testing.T) {
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", 3, b.clk.Now().Add(-time.Minute), nil)
	// A ledger connected without the bypass grant would see nothing; the
	// same shape: rows are owed and free, yet the claim returns none.
	ok, err := b.Ledger.Leasable(bg, time.Minute, ledger.Sharing{})
	if err != nil || !ok {
		t.Fatalf("Leasable = %v, %v; want true with three owed rows", ok, err)
	}
	res := b.run(t)
	if res.Stalled || res.Leased != 3 {
		t.Errorf("a healthy run: %+v", res)
	}
	if res := b.run(t); res.Stalled {
		t.Errorf("an idle run (everything queued) reported stalled: %+v", res)
	}
}

func TestConfigValidateNamesTheVariable(t *testing.T) {
	for _, c := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Batch = 0 }, "OWED_SWEEP_BATCH"},
		{func(c *Config) { c.Budget = 0 }, "OWED_SWEEP_BUDGET"},
		{func(c *Config) { c.PublishAhead = -time.Second }, "OWED_PUBLISH_AHEAD"},
		{func(c *Config) { c.RequeueAfter = 0 }, "OWED_REQUEUE_AFTER"},
		{func(c *Config) { c.RequeueBatch = 0 }, "OWED_SWEEP_REQUEUE_BATCH"},
		{func(c *Config) { c.MaxOutstanding = 0 }, "OWED_SWEEP_MAX_OUTSTANDING"},
		{func(c *Config) { c.QueueDepth = time.Millisecond }, "OWED_QUEUE_DEPTH"},
		{func(c *Config) { c.ProviderRate = pace.Rate{Count: 3} }, "OWED_PROVIDER_RATE"},
		{func(c *Config) { c.KeyPrefix = "" }, "OWED_IDEMPOTENCY_PREFIX"},
	} {
		cfg := testConfig
		c.change(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want it to name %s", err, c.want)
		}
	}
}
