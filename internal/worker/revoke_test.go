package worker_test

import (
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// A cancel or a snooze accepted after a worker claimed a row but before it
// started the send (here the recipient look-up hangs; the due-second wait,
// the account admit and the pace wait are the same window) is honoured: the
// answer says the change is certain (changed, nothing in flight), the row
// ends as the answer said, and the provider never gets the send. Issue 27
// reproduced the opposite: the cancel answered in_flight 1 and the row was
// delivered (its intent too_late); the snooze gave a delivery now and a new
// row at the new time.
func TestChangeBeforeTheSendIsHonoured(t *testing.T) {
	for _, change := range []string{"cancel", "reschedule"} {
		t.Run(change, func(t *testing.T) {
			b := setup(t, stacktest.Options{})
			due := time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond)
			id := b.Schedule(t, "acme", 1, due, nil)[0].ID
			b.sweepAll(t)
			stall := &stallingResolver{entered: make(chan struct{}), release: make(chan struct{})}
			sends := &countingSender{Sender: b.Sender}
			stop := b.start(t, func(o *worker.Options) {
				o.Resolver, o.Concurrency = stall, 1
				o.Route = func(string) (provider.Sender, error) { return sends, nil }
			})
			waitClosed(t, stall.entered, "the worker's claim")

			later := due.Add(time.Hour)
			var res ledger.ChangeResult
			var err error
			if change == "cancel" {
				res, err = b.Ledger.Cancel(bg, "acme", "reminder", "ref-0")
			} else {
				res, err = b.Ledger.Reschedule(bg, "acme", "reminder", "ref-0", later)
			}
			if want := (ledger.ChangeResult{Changed: 1}); err != nil || res != want {
				t.Fatalf("%s while the claim waits for its look-up: %+v (err %v), want %+v: certain, nothing in flight",
					change, res, err, want)
			}

			// The look-up answers; stopping the worker waits for its
			// delivery to end.
			close(stall.release)
			stop()
			if n := sends.n.Load(); n != 0 {
				t.Errorf("the worker sent %d times after the %s, want never", n, change)
			}
			if st := b.sandboxStats(t); st.Accepted != 0 {
				t.Errorf("the provider received %d sends, want none", st.Accepted)
			}
			d, err := b.Ledger.Get(bg, "acme", id)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := b.Ledger.Find(bg, "acme", ledger.Filter{RefID: "ref-0"})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case change == "cancel" && (d.State != ledger.StateCancelled || d.Attempts != 0):
				t.Errorf("row after the cancel: %s with %d attempts, want cancelled, never tried", d.State, d.Attempts)
			case change == "reschedule" && (d.State != ledger.StatePending || !d.DueAt.Equal(later) || d.Attempts != 0):
				t.Errorf("row after the snooze: %s due %s with %d attempts, want pending at %s, never tried",
					d.State, d.DueAt, d.Attempts, later)
			case len(rows) != 1:
				t.Errorf("the subject has %d rows after the %s, want the one", len(rows), change)
			}
		})
	}
}
