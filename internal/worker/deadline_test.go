package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// deadlines records the deadline of every send's context.
type deadlines struct {
	provider.Sender
	mu  sync.Mutex
	got []time.Time
}

func (s *deadlines) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	dl, _ := ctx.Deadline()
	s.mu.Lock()
	s.got = append(s.got, dl)
	s.mu.Unlock()
	return s.Sender.Send(ctx, d)
}

// A send's deadline is the row's expiry however long the check before the
// send (a ledger round trip, here made half a second slow) took: a send
// still under way at the expiry is abandoned, never answered late. The time
// left used to be read before the check and counted from after it, so the
// deadline was late by the round trip; in the 100,000-row drill a loaded
// database's round trip let the provider accept a row 21 ms after its
// expiry.
func TestASendEndsAtTheRowsExpiryHoweverLongTheCheckBeforeItTook(t *testing.T) {
	b := setup(t, stacktest.Options{})
	exp := time.Now().Add(8 * time.Second).UTC().Truncate(time.Microsecond)
	rows := b.Schedule(t, "acme", 1, time.Now().Add(-100*time.Millisecond), func(_ int, r *ledger.NewNotification) {
		r.ExpiresAt = &exp
	})
	b.sweepAll(t)
	// The check before the send makes the claim irrevocable; only the
	// test's database has the trigger that slows it.
	for _, stmt := range []string{`
CREATE FUNCTION test_slow_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(0.5);
    RETURN NEW;
END
$$`, `
CREATE TRIGGER test_slow_start BEFORE UPDATE ON owed_notifications FOR EACH ROW
WHEN (OLD.claim_revocable AND NOT NEW.claim_revocable) EXECUTE FUNCTION test_slow_start()`} {
		if _, err := b.DB.Owner.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	sender := &deadlines{Sender: b.Sender}
	// A send timeout longer than the row has left: the expiry bounds the
	// send.
	b.start(t, func(o *worker.Options) {
		o.SendTimeout = 30 * time.Second
		o.Route = func(string) (provider.Sender, error) { return sender, nil }
	})
	b.waitSettled(t, time.Minute)
	sender.mu.Lock()
	defer sender.mu.Unlock()
	if len(sender.got) != 1 {
		t.Fatalf("%d sends, want the one before the expiry", len(sender.got))
	}
	if dl := sender.got[0]; dl.IsZero() || dl.After(exp) {
		t.Errorf("the send's deadline is %s after the row's expiry, want at or before it", dl.Sub(exp))
	}
	if d, _ := b.Ledger.Get(bg, "acme", rows[0].ID); d.State != ledger.StateDelivered {
		t.Errorf("row: %s, want delivered before its expiry", d.State)
	}
}
