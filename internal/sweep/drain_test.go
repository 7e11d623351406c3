package sweep

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/stacktest"
)

func TestCapsAreThePaceOrTheSendsOverTheQueueDepth(t *testing.T) {
	rate := func(s string) pace.Rate {
		r, err := pace.ParseRate(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, c := range []struct {
		rate   string
		max    int
		want   int
		reason string
	}{
		{"40/s", 100000, 80, "40 a second over the 2s queue depth"},
		{"40/m", 100000, 2, "40 a minute over 2s, rounded up"},
		{"40/s", 50, 50, "the configured cap still bounds a paced account"},
		{"1/h", 100000, 1, "a slow pace still lets one row out"},
	} {
		cfg := testConfig
		cfg.QueueDepth, cfg.MaxOutstanding = 2*time.Second, c.max
		if got := cfg.PacedCap(rate(c.rate)); got != c.want {
			t.Errorf("rate %q, max %d: cap %d, want %d (%s)", c.rate, c.max, got, c.want, c.reason)
		}
	}
	cfg := testConfig
	cfg.QueueDepth = 2 * time.Second
	for _, c := range []struct {
		perSecond float64
		want      int
	}{{0, 100}, {1000, 2100}, {1e9, 100000}} {
		if got := cfg.UnpacedCap(c.perSecond); got != c.want {
			t.Errorf("unpaced, seen sending %g/s: cap %d, want %d (that over 2s, plus a slice of 100, at most 100000)",
				c.perSecond, got, c.want)
		}
	}
}

func TestBackpressureHoldsRowsUntilWorkersFreeRoom(t *testing.T) {
	cfg := testConfig
	cfg.MaxOutstanding = 150
	b := setupWith(t, stacktest.Options{}, cfg, nil)
	b.Schedule(t, "acme", 400, b.clk.Now().Add(-time.Minute), nil)

	res := b.run(t)
	if res.Leased != 150 || res.Slices != 2 || res.HeldBack != HeldBackpressure || res.MaxOutstanding != 150 || !res.Complete {
		t.Fatalf("first run: %+v, want 150 leased in 2 slices, then held back by backpressure at the cap of 150", res)
	}
	res = b.run(t)
	if res.Leased != 0 || res.Outstanding != 150 || res.HeldBack != HeldBackpressure || res.Stalled || !res.Complete {
		t.Fatalf("second run: %+v, want nothing leased with 150 outstanding, held back, not stalled", res)
	}
	// The workers settle 100 of the queued rows (cancelled here: settled
	// either way), which frees their room.
	for i := 0; i < 100; i++ {
		if r, err := b.Ledger.Cancel(bg, "acme", "reminder", fmt.Sprintf("ref-%d", i)); err != nil || r.Changed != 1 {
			t.Fatalf("cancel ref-%d: %+v, %v", i, r, err)
		}
	}
	res = b.run(t)
	if res.Outstanding != 50 || res.Leased != 100 || res.HeldBack != HeldBackpressure {
		t.Errorf("third run: %+v, want 50 outstanding and 100 more leased", res)
	}
	if got := len(b.consumeAll(t)); got != 250 {
		t.Errorf("queue holds %d messages, want 250: the rows held back stay in the ledger", got)
	}
}

func TestRunThatLeasesTheLastRowAtTheCapHoldsNothingBack(t *testing.T) {
	cfg := testConfig
	cfg.MaxOutstanding = 150
	b := setupWith(t, stacktest.Options{}, cfg, nil)
	b.Schedule(t, "acme", 150, b.clk.Now().Add(-time.Minute), nil)
	if res := b.run(t); res.Leased != 150 || res.HeldBack != "" {
		t.Errorf("run: %+v, want all 150 leased and nothing held back", res)
	}
}

func TestPacedCapBoundsTheRun(t *testing.T) {
	cfg := testConfig
	cfg.ProviderRate, _ = pace.ParseRate("30/s")
	b := setupWith(t, stacktest.Options{}, cfg, nil)
	b.Schedule(t, "acme", 200, b.clk.Now().Add(-time.Minute), nil)
	// 30 a second over the 2s queue depth: 60 rows.
	res := b.run(t)
	if res.Leased != 60 || res.MaxOutstanding != 60 || res.HeldBack != HeldBackpressure {
		t.Errorf("run: %+v, want 60 leased, held back at the paced cap of 60", res)
	}
}

func TestRequeuesNeverStarveNewRows(t *testing.T) {
	b := setup(t, stacktest.Options{})
	// 1,000 rows were published and their messages lost: more than ten
	// slices of the batch wait past their lease.
	b.Schedule(t, "acme", 1000, b.clk.Now().Add(-20*time.Minute), func(i int, r *ledger.NewNotification) {
		r.RefID = fmt.Sprintf("stale-%d", i)
	})
	for b.run(t).Leased > 0 {
	}
	b.consumeAll(t)
	b.clk.Advance(testConfig.RequeueAfter + time.Minute)
	fresh := b.Schedule(t, "acme", 10, b.clk.Now(), func(i int, r *ledger.NewNotification) {
		r.RefID = fmt.Sprintf("fresh-%d", i)
	})

	res := b.run(t)
	if res.Requeued != testConfig.RequeueBatch {
		t.Errorf("requeued %d, want the requeue slice of %d", res.Requeued, testConfig.RequeueBatch)
	}
	if res.Leased != res.Requeued+10 || res.Published != res.Leased {
		t.Errorf("run: %+v, want the 10 newly due rows leased and published beside the requeues", res)
	}
	for _, r := range fresh {
		d, err := b.Ledger.Get(bg, "acme", r.ID)
		if err != nil || d.State != ledger.StateQueued {
			t.Errorf("newly due row %d is %q (%v) after the first run, want queued", r.ID, d.State, err)
		}
	}
}

// slowQueue is the real queue, slower: each Publish waits first, so a run's
// slices take long enough to reach its budget.
type slowQueue struct {
	Publisher
	wait time.Duration
}

func (q slowQueue) Publish(ctx context.Context, msgs []queue.Message) ([]queue.PublishResult, error) {
	time.Sleep(q.wait)
	return q.Publisher.Publish(ctx, msgs)
}

func TestRunStopsNearItsBudgetAndHoldsNothing(t *testing.T) {
	cfg := testConfig
	cfg.Budget = 6 * time.Second
	b := setupWith(t, stacktest.Options{}, cfg, func(p Publisher) Publisher { return slowQueue{p, time.Second} })
	b.Schedule(t, "acme", 1500, b.clk.Now().Add(-time.Minute), nil)

	res := b.run(t)
	if res.HeldBack != HeldBudget || !res.Complete || res.Leased == 0 || res.Leased >= 1500 || res.Released != 0 {
		t.Fatalf("run: %+v, want a complete run that stopped short of the backlog near its budget", res)
	}
	bl, err := b.Ledger.Backlog(bg)
	if err != nil {
		t.Fatal(err)
	}
	if pub := int64(res.Published); bl.ByState[ledger.StateLeased] != 0 || bl.ByState[ledger.StateQueued] != pub ||
		bl.ByState[ledger.StatePending] != 1500-pub {
		t.Errorf("backlog after the run: %+v, want every leased row published and queued, the rest pending", bl.ByState)
	}
}
