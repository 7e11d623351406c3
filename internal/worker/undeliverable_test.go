package worker_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// stopped answers as Twilio does for a number that replied STOP (error
// 21610, HTTP 400: https://www.twilio.com/docs/api/errors/21610) for
// acme's r0 while refuse is set, delivers everything else, and counts the
// sends it was asked for per tenant and recipient.
type stopped struct {
	provider.Sender
	refuse *atomic.Bool
	mu     *sync.Mutex
	calls  map[string]int
}

func newStopped(s provider.Sender) stopped {
	r := &atomic.Bool{}
	r.Store(true)
	return stopped{Sender: s, refuse: r, mu: &sync.Mutex{}, calls: map[string]int{}}
}

func (s stopped) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	s.mu.Lock()
	s.calls[d.Tenant+"/"+d.Recipient]++
	s.mu.Unlock()
	if d.Tenant == "acme" && d.Recipient == "r0" && s.refuse.Load() {
		e := provider.NewError(s.Name(), provider.Permanent, 400, "21610", "Attempt to send to unsubscribed recipient")
		e.Recipient = true
		return provider.Result{}, e
	}
	return s.Sender.Send(ctx, d)
}

func (s stopped) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[key]
}

// scheduleR0 schedules one row to r0 in tenant, with a reference of its own.
func scheduleR0(t *testing.T, b *bundle, tenant, ref string) int64 {
	t.Helper()
	rows := b.Schedule(t, tenant, 1, time.Now().Add(-time.Second), func(_ int, r *ledger.NewNotification) { r.RefID = ref })
	b.sweepAll(t)
	return rows[0].ID
}

// A recipient's permanent failure marks the address undeliverable in its
// tenant; the next row to it there is skipped without a provider call,
// another tenant's row to the same address is sent, and clearing the mark
// makes the address sendable again.
func TestRecipientFailureMarksTheAddressUndeliverable(t *testing.T) {
	b := setup(t, stacktest.Options{})
	s := newStopped(b.Sender)
	b.start(t, func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return s, nil }
	})
	first := scheduleR0(t, b, "acme", "first")
	b.waitSettled(t, 30*time.Second)
	if d, _ := b.Ledger.Get(bg, "acme", first); d.State != ledger.StateFailed {
		t.Fatalf("the refused row is %s, want failed", d.State)
	}
	u, marked, err := b.Ledger.LookupUndeliverable(bg, "acme", "sms", "r0")
	if err != nil || !marked || u.Code != "21610" || u.NotificationID != first || u.Provider != b.Sender.Name() {
		t.Fatalf("mark after the 21610: %+v, %v, %v; want r0 marked with 21610 by row %d", u, marked, err, first)
	}

	second := scheduleR0(t, b, "acme", "second")
	other := scheduleR0(t, b, "globex", "other")
	b.waitSettled(t, 30*time.Second)
	d, _ := b.Ledger.Get(bg, "acme", second)
	if d.State != ledger.StateSkipped || !strings.Contains(d.LastError, "recipient undeliverable: "+b.Sender.Name()+" 21610 since ") {
		t.Errorf("second row to the marked address: %s, %q; want skipped naming the mark", d.State, d.LastError)
	}
	if n := s.count("acme/r0"); n != 1 {
		t.Errorf("provider calls for acme's r0: %d, want 1 (the marked address is not sent to again)", n)
	}
	if d, _ := b.Ledger.Get(bg, "globex", other); d.State != ledger.StateDelivered || s.count("globex/r0") != 1 {
		t.Errorf("globex's row to the same address: %s after %d calls, want delivered (the mark is acme's)", d.State, s.count("globex/r0"))
	}

	// The customer replied START: the mark is cleared and the next row goes out.
	s.refuse.Store(false)
	if was, err := b.Ledger.ClearUndeliverable(bg, "acme", "sms", "r0"); err != nil || !was {
		t.Fatalf("clear: %v, %v; want the mark removed", was, err)
	}
	third := scheduleR0(t, b, "acme", "third")
	b.waitSettled(t, 30*time.Second)
	if d, _ := b.Ledger.Get(bg, "acme", third); d.State != ledger.StateDelivered || s.count("acme/r0") != 2 {
		t.Errorf("row after the clear: %s after %d calls, want delivered on a second call", d.State, s.count("acme/r0"))
	}
}

// OWED_UNDELIVERABLE=false: a recipient's failure marks nothing and a mark
// already there skips nothing.
func TestUndeliverableOff(t *testing.T) {
	b := setup(t, stacktest.Options{})
	s := newStopped(b.Sender)
	if err := b.Ledger.MarkUndeliverable(bg, ledger.Undeliverable{Tenant: "acme", Channel: "sms", Address: "r1",
		Provider: "twilio", Code: "21610", Reason: "marked before"}); err != nil {
		t.Fatal(err)
	}
	b.start(t, func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return s, nil }
		o.NoUndeliverable = true
	})
	rows := b.Schedule(t, "acme", 2, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	b.waitSettled(t, 30*time.Second)
	if d, _ := b.Ledger.Get(bg, "acme", rows[1].ID); d.State != ledger.StateDelivered || s.count("acme/r1") != 1 {
		t.Errorf("row to an address marked before: %s after %d calls, want delivered (the setting is off)", d.State, s.count("acme/r1"))
	}
	if _, marked, err := b.Ledger.LookupUndeliverable(bg, "acme", "sms", "r0"); err != nil || marked {
		t.Errorf("r0 after its 21610 with the setting off: marked %v, %v; want not marked", marked, err)
	}
}

// OWED_UNDELIVERABLE is on unless set false.
func TestUndeliverableSetting(t *testing.T) {
	t.Setenv("OWED_DATABASE_URL", "postgres://owed@127.0.0.1/owed")
	t.Setenv("OWED_QUEUE_URL", "http://127.0.0.1:8181")
	t.Setenv("OWED_QUEUE_TOKEN", "token")
	for _, v := range []string{"", "true", "false"} {
		if v != "" {
			t.Setenv("OWED_UNDELIVERABLE", v)
		}
		c, err := worker.LoadConfig()
		if err != nil {
			t.Fatal(err)
		}
		if off := c.Options().NoUndeliverable; off != (v == "false") {
			t.Errorf("OWED_UNDELIVERABLE=%q: off %v", v, off)
		}
	}
}

// toPhone resolves every recipient to one phone number, as the sql
// resolver maps a contact to its address.
type toPhone struct{}

func (toPhone) Resolve(context.Context, string, string, string) (string, bool, error) {
	return "+15550100", false, nil
}

// A resolver that maps the recipient to another address has that address
// looked up, not the recipient the claim read the mark of: a marked phone
// number is skipped whatever the row's recipient is called.
func TestTheResolvedAddressIsWhatIsMarked(t *testing.T) {
	b := setup(t, stacktest.Options{})
	if err := b.Ledger.MarkUndeliverable(bg, ledger.Undeliverable{Tenant: "acme", Channel: "sms", Address: "+15550100",
		Provider: "twilio", Code: "21610", Reason: "STOP"}); err != nil {
		t.Fatal(err)
	}
	id := scheduleR0(t, b, "acme", "mapped")
	b.start(t, func(o *worker.Options) { o.Resolver = toPhone{} })
	b.waitSettled(t, 30*time.Second)
	if d, _ := b.Ledger.Get(bg, "acme", id); d.State != ledger.StateSkipped || !strings.Contains(d.LastError, "21610") {
		t.Errorf("row to a contact whose number is marked: %s, %q; want skipped naming 21610", d.State, d.LastError)
	}
}
