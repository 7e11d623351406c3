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
	// calls counts the Receive calls begun.
	calls atomic.Int64
}

func (q *countingQueue) Receive(ctx context.Context, max int, wait, visibility time.Duration) ([]queue.Delivery, error) {
	q.calls.Add(1)
	msgs, err := q.Queue.Receive(ctx, max, wait, visibility)
	q.received.Add(int64(len(msgs)))
	return msgs, err
}

// A healthy backlog behind a provider limit is received about once per
// delivery: the worker takes its slots from the shared pace before each
// receive, and takes no more messages than it holds slots for within the
// max wait. The pace here is tighter than the worker's pool (16 senders, 3
// slots within the max wait), the shape in which a worker that receives
// blindly hands most messages back and receives them again.
func TestBacklogBehindAProviderLimitIsReceivedOncePerDelivery(t *testing.T) {
	receivedPerDelivery(t, 1, 50, "10/s", 200*time.Millisecond)
}

// Several worker processes (separate pools, separate Worker values, one
// queue) behind one slow provider account: each receives only for slots it
// has taken from the shared pace, so no process receives a message for a
// slot another one takes. Counting only its own held messages, each process
// used to receive for the same free slots, and all but one handed the
// message back to receive it again (2.06 receives per delivery here, 3–4
// in bench/limited).
func TestProcessesSharingAPaceReceiveOncePerDelivery(t *testing.T) {
	receivedPerDelivery(t, 4, 80, "20/s", 300*time.Millisecond)
}

// receivedPerDelivery drains a backlog of rows through processes workers
// of 16 senders sharing a pace at rate, and fails unless every row was
// delivered once on at most 1.2 receives each.
func receivedPerDelivery(t *testing.T, processes, rows int, rate string, maxWait time.Duration) {
	t.Helper()
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", rows, time.Now().Add(-time.Second), nil)
	if n := b.sweepAll(t); n != rows {
		t.Fatalf("published %d, want %d", n, rows)
	}
	q := &countingQueue{Queue: b.Queue}
	for range processes {
		l, paces := b.process(t, rate)
		b.start(t, func(o *worker.Options) {
			o.Queue, o.Ledger, o.Pace = q, l, paces
			o.Concurrency, o.PaceMaxWait = 16, maxWait
		})
	}
	b.waitSettled(t, 120*time.Second)
	st := b.sandboxStats(t)
	if st.Accepted != int64(rows) || st.Duplicates != 0 {
		t.Errorf("sandbox: accepted=%d duplicates=%d, want %d and 0", st.Accepted, st.Duplicates, rows)
	}
	received := q.received.Load()
	t.Logf("%d processes: %d receives for %d deliveries: %.2f per delivery", processes, received, rows, float64(received)/float64(rows))
	if limit := rows * 12 / 10; received > int64(limit) {
		t.Errorf("%d receives for %d deliveries, want at most %d (1.2 per delivery)", received, rows, limit)
	}
	if st.RateLimited != 0 {
		t.Errorf("the sandbox refused %d sends: the workers outran the pace", st.RateLimited)
	}
}

// A worker takes slots ahead only while there is a backlog. On an empty
// queue its first receive (made, as every first one, for slots taken
// ahead) comes back empty and the slots go back to the pace, so an idle
// worker holds none: a new message's slot is not pushed back by slots
// taken for messages that never came.
func TestIdleWorkerGivesItsSlotsBack(t *testing.T) {
	b := setup(t, stacktest.Options{})
	l, paces := b.process(t, "1/s")
	before, _, err := paces("sandbox").Next(bg)
	if err != nil || before != 0 {
		t.Fatalf("the pace's next slot is %s away (%v) before the worker started, want now", before, err)
	}
	q := &countingQueue{Queue: b.Queue}
	// Eight senders make one fetcher, so its second receive begins only
	// after the first came back and the gate heard of it.
	b.start(t, func(o *worker.Options) {
		o.Queue, o.Ledger, o.Pace = q, l, paces
		o.Concurrency, o.PaceMaxWait = 8, 20*time.Second
	})
	deadline := time.Now().Add(30 * time.Second)
	for q.calls.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the worker began %d receives in 30s, want 2", q.calls.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The first receive took ten slots, a second apart, that outlast its
	// long poll; given back, the next free slot is the first of them, which
	// has passed.
	wait, _, err := paces("sandbox").Next(bg)
	if err != nil {
		t.Fatal(err)
	}
	if wait >= time.Second {
		t.Errorf("after an empty receive the pace's next slot is %s away: the worker kept the slots it took ahead", wait)
	}
}
