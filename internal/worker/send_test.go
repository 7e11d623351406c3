package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// maybeSent answers its first send the way an adapter answers a 5xx or an
// unreadable 200 after the request went out (Transient, MaybeSent), having
// delivered it; later sends go through the sandbox. It also keeps the
// expiry each send was given.
type maybeSent struct {
	provider.Sender
	answered atomic.Bool
	mu       sync.Mutex
	expiries []time.Time
}

func (s *maybeSent) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	s.mu.Lock()
	s.expiries = append(s.expiries, d.ExpiresAt)
	s.mu.Unlock()
	res, err := s.Sender.Send(ctx, d)
	if err == nil && !s.answered.Swap(true) {
		return provider.Result{}, &provider.Error{Provider: s.Name(), Class: provider.Transient, HTTPStatus: 502,
			Message: "bad gateway after the request was sent", MaybeSent: true}
	}
	return res, err
}

// A retry after an answer that says the request may have been taken (a 5xx
// the adapter marks MaybeSent) is flagged a possible duplicate, and every
// send carries the row's expiry for providers that can enforce it.
func TestMaybeSentRetryIsFlaggedAndExpiryIsPassedOn(t *testing.T) {
	b := setup(t, stacktest.Options{})
	exp := time.Now().Add(30 * time.Minute).UTC().Truncate(time.Microsecond)
	rows := b.Schedule(t, "acme", 1, time.Now().Add(-time.Second), func(_ int, r *ledger.NewNotification) {
		r.ExpiresAt = &exp
	})
	b.sweepAll(t)
	sender := &maybeSent{Sender: b.Sender}
	b.start(t, func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return sender, nil }
		o.RetryBase = 20 * time.Millisecond
	})
	b.waitSettled(t, 30*time.Second)
	d, _ := b.Ledger.Get(bg, "acme", rows[0].ID)
	if d.State != ledger.StateDelivered || len(d.History) != 2 || !d.History[1].PossibleDuplicate {
		t.Errorf("row: %s, history %+v; want delivered on a second attempt flagged possible duplicate", d.State, d.History)
	}
	sender.mu.Lock()
	defer sender.mu.Unlock()
	for i, got := range sender.expiries {
		// The expiry is placed on the worker's clock, never later than
		// the ledger's.
		if got.IsZero() || got.After(exp) || exp.Sub(got) > time.Minute {
			t.Errorf("send %d carried expiry %v, want the row's %v", i, got, exp)
		}
	}
}
