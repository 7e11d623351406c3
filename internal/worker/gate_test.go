package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// countingQueue counts the messages every Receive hands out: on SQS each
// one is a receive that counts towards the queue's redelivery limit.
type countingQueue struct {
	worker.Queue
	received atomic.Int64
}

func (q *countingQueue) Receive(ctx context.Context, max int, wait, visibility time.Duration) ([]queue.Delivery, error) {
	msgs, err := q.Queue.Receive(ctx, max, wait, visibility)
	q.received.Add(int64(len(msgs)))
	return msgs, err
}

// A healthy backlog behind a provider limit is received about once per
// delivery: the worker asks the shared pace how far away its next slot is
// before each receive, and takes no more messages than the pace can send
// within the max wait. The pace here is tighter than the worker's pool (16
// senders, 3 slots within the max wait), the shape in which a worker that
// receives blindly hands most messages back and receives them again.
func TestBacklogBehindAProviderLimitIsReceivedOncePerDelivery(t *testing.T) {
	const rows = 50
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", rows, time.Now().Add(-time.Second), nil)
	if n := b.sweepAll(t); n != rows {
		t.Fatalf("published %d, want %d", n, rows)
	}
	l, paces := b.process(t, "10/s")
	q := &countingQueue{Queue: b.Queue}
	b.start(t, func(o *worker.Options) {
		o.Queue, o.Ledger, o.Pace = q, l, paces
		o.Concurrency, o.PaceMaxWait = 16, 200*time.Millisecond
	})
	b.waitSettled(t, 60*time.Second)
	st := b.sandboxStats(t)
	if st.Accepted != rows || st.Duplicates != 0 {
		t.Errorf("sandbox: accepted=%d duplicates=%d, want %d and 0", st.Accepted, st.Duplicates, rows)
	}
	received := q.received.Load()
	t.Logf("%d receives for %d deliveries: %.2f per delivery", received, rows, float64(received)/rows)
	if limit := rows * 12 / 10; received > int64(limit) {
		t.Errorf("%d receives for %d deliveries, want at most %d (1.2 per delivery)", received, rows, limit)
	}
	if st.RateLimited != 0 {
		t.Errorf("the sandbox refused %d sends: the worker outran the pace", st.RateLimited)
	}
}

// Several worker processes (separate pools, separate Worker values, one
// queue) behind one slow provider account: each receives only for slots it
// has taken from the shared pace, so no process receives a message for a
// slot another one takes. Counting only its own held messages, each process
// used to receive for the same free slots, and all but one handed the
// message back to receive it again (3–4 receives per delivery with 4
// processes).
func TestProcessesSharingAPaceReceiveOncePerDelivery(t *testing.T) {
	const (
		rows      = 80
		processes = 4
	)
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", rows, time.Now().Add(-time.Second), nil)
	if n := b.sweepAll(t); n != rows {
		t.Fatalf("published %d, want %d", n, rows)
	}
	q := &countingQueue{Queue: b.Queue}
	for range processes {
		l, paces := b.process(t, "20/s")
		b.start(t, func(o *worker.Options) {
			o.Queue, o.Ledger, o.Pace = q, l, paces
			o.Concurrency, o.PaceMaxWait = 16, 300*time.Millisecond
		})
	}
	b.waitSettled(t, 120*time.Second)
	st := b.sandboxStats(t)
	if st.Accepted != rows || st.Duplicates != 0 {
		t.Errorf("sandbox: accepted=%d duplicates=%d, want %d and 0", st.Accepted, st.Duplicates, rows)
	}
	received := q.received.Load()
	t.Logf("%d processes: %d receives for %d deliveries: %.2f per delivery", processes, received, rows, float64(received)/rows)
	if limit := rows * 12 / 10; received > int64(limit) {
		t.Errorf("%d receives for %d deliveries, want at most %d (1.2 per delivery)", received, rows, limit)
	}
}
