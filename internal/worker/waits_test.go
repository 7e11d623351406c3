package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/queue/jetstream"
	"github.com/owedhq/owed/internal/queue/jetstream/jsserver"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/sweep"
	"github.com/owedhq/owed/internal/worker"
)

// deadReceiver is one tenant's webhook receiver that is down: every send of
// a row of tenant answers 503, a transient failure retried on the channel's
// schedule; every other tenant's rows go through the sandbox.
type deadReceiver struct {
	provider.Sender
	tenant string
	failed atomic.Int64
}

func (s *deadReceiver) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	if d.Tenant == s.tenant {
		s.failed.Add(1)
		return provider.Result{}, provider.NewError(s.Name(), provider.Transient, 503, "", "the receiver is down")
	}
	return s.Sender.Send(ctx, d)
}

// jetStreamQueue starts a JetStream server inside the test and provisions a
// stream and consumer with the given MaxAckPending.
func jetStreamQueue(t *testing.T, maxAckPending int) *jetstream.Client {
	t.Helper()
	srv, err := jsserver.Start(jsserver.Config{Addr: "127.0.0.1:0", StoreDir: t.TempDir(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	q, err := jetstream.New(bg, jetstream.Config{URL: srv.ClientURL(), Provision: true, MaxAckPending: maxAckPending})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// Waits live in the ledger, not in the queue (issue 25). JetStream's
// consumer delivers nothing once MaxAckPending messages are unacked, and a
// message returned for later (a NAK with a delay) is unacked for its whole
// delay. Tenant acme's webhook receiver is down (its rows' retries are ten
// minutes away) and tenant globex is paused by on-call, together as many
// rows as the consumer's MaxAckPending: their waits are handed back to the
// ledger and their messages acked, so a row of a third tenant, due now, is
// still received and delivered. Before, each wait was a NAK that kept its
// message in flight, and the third tenant's row was never received.
func TestLongWaitsLeaveTheQueuesInFlightSet(t *testing.T) {
	b := setup(t, stacktest.Options{})
	const maxAckPending = 6
	q := jetStreamQueue(t, maxAckPending)
	sw, err := sweep.New(b.Ledger, q, sweep.Config{Batch: 500, Budget: 30 * time.Second, ProviderRate: testSweepRate,
		PublishAhead: time.Minute, RequeueAfter: 10 * time.Minute, KeyPrefix: "owed-"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	acme := b.Schedule(t, "acme", maxAckPending/2, time.Now().Add(-time.Second), nil)
	globex := b.Schedule(t, "globex", maxAckPending/2, time.Now().Add(-time.Second), nil)
	if res := read(t, sw.Run); res.Published != maxAckPending {
		t.Fatalf("published %d, want %d", res.Published, maxAckPending)
	}
	// globex is paused once its rows are in the queue (the sweep leases
	// nothing of a paused tenant, so a pause before it would keep them out
	// of the queue altogether).
	if err := pace.NewTenants(b.DB.Operator, nil).Pause(bg, "globex", "runaway campaign", "bob"); err != nil {
		t.Fatal(err)
	}
	sender := &deadReceiver{Sender: b.Sender, tenant: "acme"}
	// The worker's own defaults decide how long a message may wait in the
	// queue: the test sets no QueueDelayMax.
	b.start(t, func(o *worker.Options) {
		o.Queue = q
		o.Route = func(string) (provider.Sender, error) { return sender, nil }
		o.Retries = worker.Retries{Default: worker.MustSchedule("10m,10m")}
	})
	waitFor(t, "every waiting row was looked at", func() bool {
		for tenant, rows := range map[string][]ledger.Scheduled{"acme": acme, "globex": globex} {
			for _, r := range rows {
				d, err := b.Ledger.Get(bg, tenant, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if d.State != ledger.StateQueued || d.LastError == "" {
					return false
				}
			}
		}
		return true
	})
	if n := sender.failed.Load(); n != int64(len(acme)) {
		t.Errorf("sends to acme's dead receiver: %d, want %d (one each)", n, len(acme))
	}

	now := b.Schedule(t, "initech", 1, time.Now().Add(-time.Second), nil)
	if res := read(t, sw.Run); res.Published != 1 {
		t.Fatalf("published %d for initech, want 1 (the waiting rows' leases run to their retry)", res.Published)
	}
	waitFor(t, "initech's row, due now, is delivered while acme's and globex's rows wait", func() bool {
		d, err := b.Ledger.Get(bg, "initech", now[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		return d.State == ledger.StateDelivered
	})
	waitFor(t, "nothing waits in the consumer's in-flight set", func() bool {
		st, err := q.Stats(bg)
		if err != nil {
			t.Fatal(err)
		}
		return st.InFlight == 0
	})
	for _, r := range acme {
		d, _ := b.Ledger.Get(bg, "acme", r.ID)
		if d.State != ledger.StateQueued || d.Attempts != 1 || d.LeaseUntil == nil || time.Until(*d.LeaseUntil) < 5*time.Minute {
			t.Errorf("acme row %d: %s, %d attempts, lease until %v; want queued after one attempt, waiting in the ledger until its retry about 10m from now",
				r.ID, d.State, d.Attempts, d.LeaseUntil)
		}
	}
	for _, r := range globex {
		d, _ := b.Ledger.Get(bg, "globex", r.ID)
		if d.State != ledger.StateQueued || d.Attempts != 0 {
			t.Errorf("globex row %d: %s, %d attempts; want queued in the ledger with no attempt while its tenant is paused", r.ID, d.State, d.Attempts)
		}
	}
}
