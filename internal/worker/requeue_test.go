package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// losingQueue loses every message the worker returns to it for later, as a
// queue server that keeps its messages in memory does when it is killed
// between the return and the message's surfacing (the local SQS server in
// the drill's queue-restart fault).
type losingQueue struct {
	worker.Queue
	lost atomic.Int64
}

func (q *losingQueue) ChangeVisibility(ctx context.Context, receipt string, _ time.Duration) error {
	q.lost.Add(1)
	return q.Queue.Ack(ctx, receipt)
}

// A row whose message the worker returned to the queue (a 429's
// Retry-After), and the queue then lost, is published again once
// OWED_REQUEUE_AFTER has passed since its wait ended: the window the sweep
// gives a lost published message. The worker's lease used to add a fixed
// two minutes whatever OWED_REQUEUE_AFTER said, so in TestDrillSQS, whose
// requeue window is 30 s, the rows a 429 returned just before the SQS
// server's kill stayed owed two minutes, up to the drill's drain limit.
func TestALostReturnedMessageIsRepublishedAfterTheRequeueWindow(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 1, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	const requeueAfter, retryAfter = 30 * time.Second, time.Second
	q := &losingQueue{Queue: b.Queue}
	sender := &limitedOnce{Sender: b.Sender, db: b.DB.Owner, retryAfter: retryAfter}
	b.start(t, func(o *worker.Options) {
		o.Queue, o.RequeueAfter = q, requeueAfter
		o.Route = func(string) (provider.Sender, error) { return sender, nil }
	})
	waitFor(t, "the 429's wait is returned to the queue, which loses it", func() bool {
		d, err := b.Ledger.Get(bg, "acme", rows[0].ID)
		return err == nil && d.State == ledger.StateQueued && d.LastError != "" && q.lost.Load() == 1
	})
	// A sweep that many seconds later finds the row's lease over. The
	// margin covers the time from the release to this sweep.
	if res := b.sweepLater(t, retryAfter+requeueAfter+10*time.Second); res.Published != 1 {
		d, _ := b.Ledger.Get(bg, "acme", rows[0].ID)
		t.Fatalf("a sweep %s after the wait ended published %d rows, want the row whose message was lost (lease until %v)",
			requeueAfter+10*time.Second, res.Published, d.LeaseUntil)
	}
	waitFor(t, "the republished row is delivered", func() bool {
		d, err := b.Ledger.Get(bg, "acme", rows[0].ID)
		return err == nil && d.State == ledger.StateDelivered
	})
}
