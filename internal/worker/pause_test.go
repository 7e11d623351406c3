package worker_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// gauge reads the value of name with the label pair from reg (0 when
// absent).
func gauge(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	v, _ := sample(t, reg, name, label, value)
	return v
}

// sample reads the series of name whose labels include the pairs given
// (label, value, label, value…) from reg: a counter's or gauge's value, a
// histogram's sample count; zeros when there is none.
func sample(t *testing.T, reg *prometheus.Registry, name string, pairs ...string) (float64, uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(pairs); i += 2 {
				if have[pairs[i]] != pairs[i+1] {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), 0
			case m.GetHistogram() != nil:
				return 0, m.GetHistogram().GetSampleCount()
			}
			return m.GetGauge().GetValue(), 0
		}
	}
	return 0, 0
}

// renamed is a provider account of another name on the same sandbox.
type renamed struct {
	provider.Sender
	name string
}

func (r renamed) Name() string { return r.name }

// On-call's pauses hold rows back without an attempt: a held provider
// account sends nothing until it is resumed, a paused tenant sends nothing
// until it is resumed, each held-back row is handed back to the ledger
// (counted by its outcome) and its message acked, since a pause has no end
// the worker knows, and the gauge shows the pauses the worker read. The
// worker serves a second account, not held, so it keeps receiving.
func TestOperatorPausesHoldRowsBackWithoutAnAttempt(t *testing.T) {
	b := setup(t, stacktest.Options{})
	accounts, tenants := pace.NewAccounts(b.DB.Operator, nil), pace.NewTenants(b.DB.Operator, nil)
	if err := accounts.Hold(bg, "held", "carrier incident", "alice"); err != nil {
		t.Fatal(err)
	}
	acme := b.Schedule(t, "acme", 5, time.Now().Add(-time.Second), nil)
	globex := b.Schedule(t, "globex", 5, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	// globex is paused once its rows are in the queue: the sweep leases
	// nothing of a paused tenant, so the worker is what meets these.
	if err := tenants.Pause(bg, "globex", "runaway campaign", "bob"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	held := renamed{Sender: b.Sender, name: "held"}
	b.start(t, func(o *worker.Options) {
		o.Metrics = worker.NewMetrics(reg)
		o.Route = func(ch string) (provider.Sender, error) {
			if ch == payload.ChannelSMS {
				return held, nil
			}
			return b.Sender, nil
		}
	})
	outcome := func(o string) float64 { return gauge(t, reg, "owed_worker_messages_total", "outcome", o) }
	waitFor(t, "both pauses held rows back", func() bool {
		return outcome("account_held") == 5 && outcome("tenant_paused") == 5
	})
	waitFor(t, "the held-back rows wait in the ledger, their messages acked", func() bool {
		q := b.queueStats(t)
		return q.Visible+q.InFlight+q.Delayed == 0 && gauge(t, reg, "owed_worker_handed_back_total", "", "") == 10
	})
	if s := b.sandboxStats(t); s.Accepted != 0 {
		t.Fatalf("the sandbox accepted %d sends while the account was held", s.Accepted)
	}
	for tenant, rows := range map[string][]ledger.Scheduled{"acme": acme, "globex": globex} {
		for _, r := range rows {
			if d, _ := b.Ledger.Get(bg, tenant, r.ID); d.State.Settled() || d.Attempts != 0 {
				t.Fatalf("%s row %d: %s with %d attempts, want owed with no attempt burnt", tenant, r.ID, d.State, d.Attempts)
			}
		}
	}
	if g := gauge(t, reg, "owed_worker_operator_pauses", "kind", "tenant"); g != 1 {
		t.Errorf("paused tenants gauge = %v, want 1", g)
	}
	if g := gauge(t, reg, "owed_worker_operator_pauses", "kind", "account"); g != 1 {
		t.Errorf("held accounts gauge = %v, want 1", g)
	}

	if was, err := accounts.Resume(bg, "held", "alice", ""); err != nil || !was {
		t.Fatalf("resume the account: %v, %v", was, err)
	}
	// The pauses are looked at again when the rows' leases run out, about a
	// minute later: acme's rows go again, and the sweep leases nothing of
	// globex while it is paused.
	if res := b.sweepLater(t, 2*time.Minute); res.Published != 5 {
		t.Fatalf("the sweep a minute later published %d, want acme's 5 held-back rows", res.Published)
	}
	waitFor(t, "acme's rows are delivered", func() bool {
		for _, r := range acme {
			if d, _ := b.Ledger.Get(bg, "acme", r.ID); d.State != ledger.StateDelivered {
				return false
			}
		}
		return true
	})
	for _, r := range globex {
		if d, _ := b.Ledger.Get(bg, "globex", r.ID); d.State.Settled() || d.Attempts != 0 {
			t.Fatalf("globex row %d: %s with %d attempts while its tenant is paused", r.ID, d.State, d.Attempts)
		}
	}

	if was, err := tenants.Resume(bg, "globex", "alice", ""); err != nil || !was {
		t.Fatalf("resume the tenant: %v, %v", was, err)
	}
	waitFor(t, "globex's held-back messages were acked and the worker read the resume", func() bool {
		q := b.queueStats(t)
		return q.Visible+q.InFlight+q.Delayed == 0 && gauge(t, reg, "owed_worker_operator_pauses", "kind", "tenant") == 0
	})
	if res := b.sweepLater(t, 4*time.Minute); res.Published != 5 {
		t.Fatalf("the sweep after the tenant's resume published %d, want globex's 5 rows", res.Published)
	}
	b.waitSettled(t, time.Minute)
	if s := b.sandboxStats(t); s.Accepted != 10 || s.Duplicates != 0 {
		t.Errorf("sandbox accepted=%d duplicates=%d, want 10 and 0", s.Accepted, s.Duplicates)
	}
}

// A worker whose every account is held receives nothing: the held
// account's backlog waits in the queue instead of being claimed and handed
// back every minute, and a resume sends it.
func TestAHeldAccountsBacklogStaysInTheQueue(t *testing.T) {
	b := setup(t, stacktest.Options{})
	accounts := pace.NewAccounts(b.DB.Operator, nil)
	if err := accounts.Hold(bg, "sandbox", "carrier incident", "alice"); err != nil {
		t.Fatal(err)
	}
	b.Schedule(t, "acme", 20, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	reg := prometheus.NewRegistry()
	q := &countingQueue{Queue: b.Queue}
	b.start(t, func(o *worker.Options) { o.Queue, o.Metrics = q, worker.NewMetrics(reg) })
	waitFor(t, "the worker read the hold", func() bool {
		return gauge(t, reg, "owed_worker_operator_pauses", "kind", "account") == 1
	})
	// The window opens once the worker knows of the hold.
	time.Sleep(2 * time.Second)
	if n := q.received.Load(); n != 0 {
		t.Fatalf("the worker received %d messages while its only account was held", n)
	}
	if was, err := accounts.Resume(bg, "sandbox", "alice", ""); err != nil || !was {
		t.Fatalf("resume: %v, %v", was, err)
	}
	b.waitSettled(t, time.Minute)
	if s := b.sandboxStats(t); s.Accepted != 20 {
		t.Errorf("sandbox accepted %d, want 20", s.Accepted)
	}
}
