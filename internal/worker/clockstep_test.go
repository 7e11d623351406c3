package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// steppingPacer is the provider's pace of a host whose wall clock NTP steps
// back an hour mid-delivery: at the row's turn (after the claim, before the
// send) it steps the worker's clock back and grants the slot only once the
// row's expiry has passed, by the host's real clock.
type steppingPacer struct {
	clk     *clock.Stepping
	expires time.Time
	stepped atomic.Bool
}

func (p *steppingPacer) Reserve(context.Context, time.Duration) (time.Duration, bool, error) {
	if !p.stepped.Swap(true) {
		p.clk.Step(-time.Hour)
	}
	return time.Until(p.expires) + 500*time.Millisecond, true, nil
}
func (*steppingPacer) Pause(context.Context, time.Duration) error                 { return nil }
func (*steppingPacer) Next(context.Context) (time.Duration, time.Duration, error) { return 0, 0, nil }

// startTimes records when each send started, by the host's real clock.
type startTimes struct {
	provider.Sender
	mu     sync.Mutex
	starts []time.Time
}

func (s *startTimes) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	s.mu.Lock()
	s.starts = append(s.starts, time.Now())
	s.mu.Unlock()
	return s.Sender.Send(ctx, d)
}

// A backward step of the worker's wall clock between the claim and the send
// starts no send after the row's expiry: the expiry is reckoned on the
// clock's monotonic readings, which no step moves. Reckoned on the wall
// clock, an hour's step left the row an hour to live and it was sent late.
func TestBackwardClockStepMidDeliverySendsNothingAfterExpiry(t *testing.T) {
	b := setup(t, stacktest.Options{})
	// The expiry leaves the sweep and the claim ample time on a loaded
	// machine; the pace then holds the row past it.
	exp := time.Now().Add(8 * time.Second).UTC().Truncate(time.Microsecond)
	rows := b.Schedule(t, "acme", 1, time.Now().Add(-100*time.Millisecond), func(_ int, r *ledger.NewNotification) {
		r.ExpiresAt = &exp
	})
	b.sweepAll(t)
	clk := &clock.Stepping{}
	p := &steppingPacer{clk: clk, expires: exp}
	sender := &startTimes{Sender: b.Sender}
	b.start(t, func(o *worker.Options) {
		o.Clock, o.Pace = clk, func(string) worker.Pacer { return p }
		o.Route = func(string) (provider.Sender, error) { return sender, nil }
	})
	b.waitSettled(t, 30*time.Second)
	if !p.stepped.Load() {
		t.Fatal("the row never reached the pace: it expired before it was claimed, and the step was never taken mid-delivery")
	}
	sender.mu.Lock()
	for _, at := range sender.starts {
		if at.After(exp) {
			t.Errorf("a send started %s after the row's expiry", at.Sub(exp).Round(time.Millisecond))
		}
	}
	sender.mu.Unlock()
	if d, _ := b.Ledger.Get(bg, "acme", rows[0].ID); d.State != ledger.StateExpired || len(d.History) != 0 {
		t.Errorf("row: %s with %d attempts, want expired and never sent", d.State, len(d.History))
	}
}
