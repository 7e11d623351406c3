package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/queue"
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

// steppingSender steps the worker's wall clock by step at the first send,
// which it fails with a transient error (the receiver is down): the
// worker's choice between a retry and an expiry is made after the step.
// Every later send goes through.
type steppingSender struct {
	provider.Sender
	clk   *clock.Stepping
	step  time.Duration
	first atomic.Bool
}

func (s *steppingSender) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	if !s.first.Swap(true) {
		s.clk.Step(s.step)
		return provider.Result{}, provider.NewError(s.Name(), provider.Transient, 503, "", "the receiver is down")
	}
	return s.Sender.Send(ctx, d)
}

// retryAfterStep schedules one row due now that expires after expiresIn,
// sends it through a worker whose retry comes after retry and whose wall
// clock steps by step at the first send, which fails, and returns the
// row once the failed attempt is recorded.
func retryAfterStep(t *testing.T, expiresIn, retry, step time.Duration) (*bundle, ledger.Scheduled) {
	t.Helper()
	b := setup(t, stacktest.Options{})
	exp := time.Now().Add(expiresIn).UTC().Truncate(time.Microsecond)
	rows := b.Schedule(t, "acme", 1, time.Now().Add(-100*time.Millisecond), func(_ int, r *ledger.NewNotification) {
		r.ExpiresAt = &exp
	})
	b.sweepAll(t)
	clk := &clock.Stepping{}
	sender := &steppingSender{Sender: b.Sender, clk: clk, step: step}
	b.start(t, func(o *worker.Options) {
		o.Clock, o.Retries = clk, worker.Retries{Default: worker.Schedule{retry}}
		o.Route = func(string) (provider.Sender, error) { return sender, nil }
	})
	waitFor(t, "the failed attempt is recorded", func() bool {
		d, err := b.Ledger.Get(bg, "acme", rows[0].ID)
		return err == nil && d.Attempts == 1 && d.State != ledger.StateSending
	})
	return b, rows[0]
}

// A forward step of the wall clock after a failed send does not expire a
// row whose retry lands well before its expiry: the choice between a retry
// and an expiry is reckoned on the clock's Readings. Reckoned on the wall
// clock, an hour's step put the retry an hour past the expiry, and the row
// was settled expired, never retried.
func TestForwardClockStepAfterAFailedSendStillRetries(t *testing.T) {
	b, row := retryAfterStep(t, time.Hour, time.Second, time.Hour)
	waitFor(t, "the row is settled", func() bool {
		d, err := b.Ledger.Get(bg, "acme", row.ID)
		return err == nil && d.State.Settled()
	})
	if d, _ := b.Ledger.Get(bg, "acme", row.ID); d.State != ledger.StateDelivered || d.Attempts != 2 {
		t.Errorf("row: %s after %d attempts, want delivered by its retry, the second attempt", d.State, d.Attempts)
	}
}

// A backward step of the wall clock after a failed send does not retry a
// row whose retry would land after its expiry: it is settled expired at
// once, with the attempt. Reckoned on the wall clock, an hour's step made
// the retry a minute away look an hour before the expiry, and the row was
// handed back to wait for a retry it could never have.
func TestBackwardClockStepAfterAFailedSendExpiresTheRow(t *testing.T) {
	b, row := retryAfterStep(t, 10*time.Second, time.Minute, -time.Hour)
	d, err := b.Ledger.Get(bg, "acme", row.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != ledger.StateExpired || d.SettledAt == nil || !d.SettledAt.Before(*d.ExpiresAt) {
		t.Errorf("row: %s (settled %v, expires %v) after its failed attempt; want settled expired at once, before its expiry",
			d.State, d.SettledAt, d.ExpiresAt)
	}
}

// slotCounter is a provider account's shared pace (pace.Limiter, through
// worker.Paces) that counts the slots the gate takes ahead of a receive.
type slotCounter struct {
	worker.Pacer
	slots slotTaker
	taken atomic.Int64
}

// slotTaker is what the gate asks of a pace to take slots ahead.
type slotTaker interface {
	Rate() pace.Rate
	ReserveN(ctx context.Context, n int, maxWait time.Duration) (pace.Slots, error)
	GiveBack(ctx context.Context, s pace.Slots, k int) (pace.Slots, bool, error)
}

func (p *slotCounter) Rate() pace.Rate { return p.slots.Rate() }

func (p *slotCounter) ReserveN(ctx context.Context, n int, maxWait time.Duration) (pace.Slots, error) {
	s, err := p.slots.ReserveN(ctx, n, maxWait)
	p.taken.Add(int64(len(s.Waits)))
	return s, err
}

func (p *slotCounter) GiveBack(ctx context.Context, s pace.Slots, k int) (pace.Slots, bool, error) {
	return p.slots.GiveBack(ctx, s, k)
}

// receiveStepper steps the worker's wall clock back an hour when the first
// receive brings messages: after the gate took their slots, before any
// message takes one.
type receiveStepper struct {
	worker.Queue
	clk     *clock.Stepping
	stepped atomic.Bool
}

func (q *receiveStepper) Receive(ctx context.Context, max int, wait, visibility time.Duration) ([]queue.Delivery, error) {
	msgs, err := q.Queue.Receive(ctx, max, wait, visibility)
	if len(msgs) > 0 && !q.stepped.Swap(true) {
		q.clk.Step(-time.Hour)
	}
	return msgs, err
}

// A backward step of the wall clock after the gate took the account's slots
// ahead of a receive delays no send: the slots are kept as the clock's
// Readings, which no step moves, so each message waits at most the pace's
// max wait for its slot. Kept as wall-clock instants, every slot taken
// before an hour's step lay an hour away after it, and each message slept
// that hour before its send.
func TestBackwardClockStepAfterTheGateTookSlotsDelaysNoSend(t *testing.T) {
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", 5, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	l, paces := b.process(t, "20/s")
	clk := &clock.Stepping{}
	inner := paces("sandbox")
	p := &slotCounter{Pacer: inner, slots: inner.(slotTaker)}
	q := &receiveStepper{Queue: b.Queue, clk: clk}
	b.start(t, func(o *worker.Options) {
		o.Clock, o.Ledger, o.Queue = clk, l, q
		o.Pace = func(string) worker.Pacer { return p }
	})
	b.waitSettled(t, time.Minute)
	if !q.stepped.Load() || p.taken.Load() == 0 {
		t.Fatalf("stepped %v after %d slots taken ahead: the step was never taken between the gate's slots and the sends",
			q.stepped.Load(), p.taken.Load())
	}
}

// limitedRecipient answers the first send a rate limit the provider scoped
// to the recipient (a Telegram chat's 429) for limit; every later send goes
// through.
type limitedRecipient struct {
	provider.Sender
	limit time.Duration
	first atomic.Bool
}

func (s *limitedRecipient) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	if !s.first.Swap(true) {
		return provider.Result{}, &provider.Error{Provider: s.Name(), Class: provider.RateLimited, HTTPStatus: 429,
			RetryAfter: s.limit, Recipient: true}
	}
	return s.Sender.Send(ctx, d)
}

// steppingQueue steps the worker's wall clock back an hour when the first
// message is returned to it for later: after the worker recorded why.
type steppingQueue struct {
	worker.Queue
	clk     *clock.Stepping
	stepped atomic.Bool
}

func (q *steppingQueue) ChangeVisibility(ctx context.Context, receipt string, d time.Duration) error {
	if !q.stepped.Swap(true) {
		q.clk.Step(-time.Hour)
	}
	return q.Queue.ChangeVisibility(ctx, receipt, d)
}

// A backward step of the wall clock while a recipient is limited at the
// provider does not stretch the limit: it is kept as a Reading, which no
// step moves, so the recipient's row is sent again once the limit's second
// is over. Kept as a wall-clock instant, the limit ended an hour later after
// an hour's step, and the row was handed back to the ledger for that hour.
func TestBackwardClockStepDoesNotStretchARecipientsLimit(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 1, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	clk := &clock.Stepping{}
	q := &steppingQueue{Queue: b.Queue, clk: clk}
	sender := &limitedRecipient{Sender: b.Sender, limit: time.Second}
	b.start(t, func(o *worker.Options) {
		o.Clock, o.Queue = clk, q
		o.Route = func(string) (provider.Sender, error) { return sender, nil }
	})
	waitFor(t, "the row is delivered after the recipient's limit", func() bool {
		d, err := b.Ledger.Get(bg, "acme", rows[0].ID)
		return err == nil && d.State == ledger.StateDelivered
	})
	if !q.stepped.Load() {
		t.Error("the row was never returned for the recipient's limit: the step was never taken during it")
	}
}
