package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// answerAfterShutdown is a queue whose first Receive takes messages from
// the server at once but answers only when the test says so, as a long
// poll that found messages just as the worker was told to stop. Like an
// answer on the wire, the answer is lost if the caller gave up meanwhile:
// what the server handed out then stays hidden for its visibility timeout.
type answerAfterShutdown struct {
	worker.Queue
	once    sync.Once
	took    chan int      // the number of messages the first Receive took
	release chan struct{} // closed to let the first Receive answer
}

func (q *answerAfterShutdown) Receive(ctx context.Context, max int, wait, visibility time.Duration) ([]queue.Delivery, error) {
	first := false
	q.once.Do(func() { first = true })
	if !first {
		return q.Queue.Receive(ctx, max, wait, visibility)
	}
	msgs, err := q.Queue.Receive(context.WithoutCancel(ctx), max, wait, visibility)
	q.took <- len(msgs)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-q.release:
		return msgs, err
	}
}

// A receive under way when shutdown starts is let finish, and what it got is
// handed back at once: nothing stays hidden for the visibility timeout.
func TestReceiveUnderWayAtShutdownIsHandedBack(t *testing.T) {
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", 5, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	q := &answerAfterShutdown{Queue: b.Queue, took: make(chan int, 1), release: make(chan struct{})}
	w := b.newWorker(t, func(o *worker.Options) { o.Queue, o.VisibilityTimeout = q, time.Hour })
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-q.took; n != 5 {
		t.Fatalf("the first receive took %d messages, want all 5", n)
	}
	cancel() // shutdown starts while the receive is under way
	close(q.release)
	w.Stop()
	if st := b.queueStats(t); st.InFlight != 0 || st.Visible != 5 {
		t.Errorf("queue after shutdown: %+v, want the 5 messages visible and none in flight", st)
	}
	if st := b.sandboxStats(t); st.Accepted != 0 {
		t.Errorf("the sandbox accepted %d sends, want none: the messages came after shutdown began", st.Accepted)
	}
}

// stuckSender never answers: its send ends only when the worker cancels it.
type stuckSender struct {
	provider.Sender
	sending chan struct{} // closed when the first send starts
	once    sync.Once
}

func (s *stuckSender) Send(ctx context.Context, _ provider.Delivery) (provider.Result, error) {
	s.once.Do(func() { close(s.sending) })
	<-ctx.Done()
	return provider.Result{}, provider.TransportError(s.Name(), ctx.Err())
}

// A send cut off by the shutdown timeout is owed's own cancellation: the row
// is released without an attempt, never failed on its last one, and its
// message is back at once. The request may have reached the provider, so
// the send that finally happens is recorded as a possible duplicate.
func TestSendCutOffByShutdownCostsNoAttempt(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 1, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	stuck := &stuckSender{Sender: b.Sender, sending: make(chan struct{})}
	stop := b.start(t, func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return stuck, nil }
		// The send timeout outlasts the shutdown timeout: the shutdown, not
		// the send timeout, ends the send.
		o.MaxAttempts, o.ShutdownTimeout, o.SendTimeout, o.VisibilityTimeout = 1, 100*time.Millisecond, time.Hour, time.Hour
	})
	<-stuck.sending
	stop()
	d, _ := b.Ledger.Get(bg, "acme", rows[0].ID)
	if d.State != ledger.StateQueued || d.Attempts != 0 || len(d.History) != 0 {
		t.Fatalf("row after a cut-off send: state=%s attempts=%d history=%+v, want queued with no attempt",
			d.State, d.Attempts, d.History)
	}
	if st := b.queueStats(t); st.InFlight != 0 || st.Visible != 1 {
		t.Errorf("queue after shutdown: %+v, want the message visible at once", st)
	}
	b.start(t, func(o *worker.Options) { o.MaxAttempts = 1 })
	b.waitSettled(t, 30*time.Second)
	d, _ = b.Ledger.Get(bg, "acme", rows[0].ID)
	if d.State != ledger.StateDelivered || len(d.History) != 1 || !d.History[0].PossibleDuplicate {
		t.Errorf("row: state=%s history=%+v, want delivered on its one attempt, flagged possible duplicate", d.State, d.History)
	}
}

// A row whose last allowed send lost its answer is settled failed, but the
// provider may have taken that send: if on-call redrives the row, the send
// after the redrive is recorded as a possible duplicate.
func TestUncertainLastSendKeepsTheMarkThroughARedrive(t *testing.T) {
	b := setup(t, stacktest.Options{})
	id := b.startLosingFirstAnswer(t, func(o *worker.Options) { o.MaxAttempts = 1 })
	b.waitSettled(t, 30*time.Second)
	if d, _ := b.Ledger.Get(bg, "acme", id); d.State != ledger.StateFailed {
		t.Fatalf("row after its one send lost its answer: %s, want failed", d.State)
	}
	if res, err := b.Ledger.Redrive(bg, "acme", id); err != nil || len(res) != 1 || !res[0].Reopened {
		t.Fatalf("redrive: %+v %v", res, err)
	}
	b.sweepAll(t)
	b.waitSettled(t, 30*time.Second)
	d, _ := b.Ledger.Get(bg, "acme", id)
	if d.State != ledger.StateDelivered || len(d.History) != 2 || !d.History[1].PossibleDuplicate {
		t.Errorf("redriven row: state=%s history=%+v, want delivered on a second attempt flagged possible duplicate",
			d.State, d.History)
	}
	if st := b.sandboxStats(t); st.Duplicates != 1 {
		t.Errorf("sandbox duplicates %d, want 1 (the provider did take the first send)", st.Duplicates)
	}
}
