package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// ackChecked is the real queue with a check on every ack: the row of each
// message acked must be settled already (ack last). It records which rows'
// messages it received, by receipt.
type ackChecked struct {
	worker.Queue
	t      *testing.T
	ledger *ledger.Ledger

	mu   sync.Mutex
	rows map[string]envelope.Envelope
}

func (q *ackChecked) Receive(ctx context.Context, max int, wait, visibility time.Duration) ([]queue.Delivery, error) {
	ds, err := q.Queue.Receive(ctx, max, wait, visibility)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, d := range ds {
		if env, err := envelope.Decode(d.Body); err == nil {
			q.rows[d.Receipt] = env
		}
	}
	return ds, err
}

func (q *ackChecked) Ack(ctx context.Context, receipts ...string) error {
	q.mu.Lock()
	envs := make([]envelope.Envelope, 0, len(receipts))
	for _, r := range receipts {
		envs = append(envs, q.rows[r])
	}
	q.mu.Unlock()
	for _, env := range envs {
		d, err := q.ledger.Get(ctx, env.Tenant, env.ID)
		if err != nil || !d.State.Settled() {
			q.t.Errorf("row %d's message acked while the row is %s (err %v): ack before the settle committed", env.ID, d.State, err)
		}
	}
	return q.Queue.Ack(ctx, receipts...)
}

// The completer: a sender hands its accepted send over and takes its next
// message without waiting for the settle, the sends that gathered within the
// linger share one commit, and each message is acked only once its row's
// settle committed. With one sender, a settle the sender waited for would
// be a batch of one every time; here the rows' attempts come in batches
// (one commit stamps one instant on every attempt it records).
func TestCompleterSettlesInBatchesAndAcksAfterTheCommit(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 20, time.Now().Add(-time.Minute), nil)
	b.sweepAll(t)
	q := &ackChecked{Queue: b.Queue, t: t, ledger: b.Ledger, rows: map[string]envelope.Envelope{}}
	b.start(t, func(o *worker.Options) {
		o.Queue, o.Concurrency, o.SettleLinger = q, 1, worker.SettleLingerMax
	})
	b.waitSettled(t, 60*time.Second)
	waitNotInFlight(t, b)
	finished := map[time.Time]int{}
	for _, r := range rows {
		d, err := b.Ledger.Get(bg, "acme", r.ID)
		if err != nil || d.State != ledger.StateDelivered || len(d.History) != 1 {
			t.Fatalf("row %d: %s with %d attempts (err %v), want delivered once", r.ID, d.State, len(d.History), err)
		}
		finished[d.History[0].FinishedAt]++
	}
	if len(finished) == len(rows) {
		t.Errorf("every one of %d accepted sends was settled in a commit of its own: the sender waited for each settle", len(rows))
	}
	if st := b.sandboxStats(t); st.Accepted != int64(len(rows)) || st.Duplicates != 0 {
		t.Errorf("sandbox: accepted=%d duplicates=%d, want %d and 0", st.Accepted, st.Duplicates, len(rows))
	}
}
