package worker_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/sweep"
	"github.com/owedhq/owed/internal/worker"
)

// travel is a clock the test moves forward: the ledger, the sweeper and the
// worker read it, so "ten minutes pass" takes no ten minutes. The queue's
// own delays are real, so the test keeps them short (QueueDelayMax) and the
// retries hours away go through the sweeper, as in production.
type travel struct{ ahead atomic.Int64 }

func (c *travel) Now() time.Time {
	return time.Now().Add(time.Duration(c.ahead.Load())).UTC().Truncate(time.Microsecond)
}
func (c *travel) NowOrNil() *time.Time    { now := c.Now(); return &now }
func (c *travel) advance(d time.Duration) { c.ahead.Add(int64(d)) }

func TestScheduleParsesAndRefuses(t *testing.T) {
	t.Parallel()
	s, err := worker.ParseSchedule(" 30s, 2m ,1h")
	if err != nil || len(s) != 3 || s[0] != 30*time.Second || s[1] != 2*time.Minute || s[2] != time.Hour {
		t.Fatalf("ParseSchedule = %v, %v", s, err)
	}
	for _, bad := range []string{"30s,,1m", "soon", "-5s", "0s", "72h"} {
		if _, err := worker.ParseSchedule(bad); err == nil {
			t.Errorf("ParseSchedule(%q) accepted", bad)
		}
	}
}

// A webhook receiver down (503) for ten minutes loses no row: on the
// webhook channel's default schedule (Standard Webhooks': 5 s, 5 min,
// 30 min, …) the rows that had not expired by their next retry are
// delivered once the receiver is back, and the rows whose next retry would
// land after their expiry are settled expired, not failed. Nothing is
// dead-lettered.
func TestWebhookReceiverDownTenMinutesLosesNoRow(t *testing.T) {
	b := setup(t, stacktest.Options{Sandbox: func(c *sandbox.Config) { c.Faults.ErrorRate = 1 }})
	clk := &travel{}
	l := ledger.New(b.DB.App, clk)
	// PublishAhead is short because quiet, below, waits for the queue to
	// drain in real time: a retry the sweep published a minute ahead
	// stayed delayed in the queue for that minute, as long as quiet's
	// deadline, and the test failed whenever a retry's jittered due time
	// fell near the end of that window.
	sw, err := sweep.New(l, b.Queue, sweep.Config{Batch: 500, Budget: 30 * time.Second, ProviderRate: testSweepRate,
		PublishAhead: 5 * time.Second, RequeueAfter: 10 * time.Minute, KeyPrefix: "owed-"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(20 * time.Minute)
	rows := b.Schedule(t, "acme", 6, time.Now().Add(-time.Second), func(i int, r *ledger.NewNotification) {
		r.Channel = "webhook"
		if i%2 == 1 {
			r.ExpiresAt = &exp
		}
	})
	sweepAll := func() {
		t.Helper()
		for {
			res, err := sw.Run(bg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Leased == 0 {
				return
			}
		}
	}
	// quiet waits until every row is settled or waits for the sweeper, with
	// the queue drained: the worker has done all it can until time moves.
	quiet := func() {
		t.Helper()
		waitFor(t, "every row is settled or waits for its retry", func() bool {
			for _, r := range rows {
				d, err := l.Get(bg, "acme", r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if !d.State.Settled() && d.State != ledger.StateQueued {
					return false
				}
			}
			q := b.queueStats(t)
			return q.Visible+q.InFlight+q.Delayed == 0
		})
	}
	sweepAll()
	b.start(t, func(o *worker.Options) {
		o.Ledger, o.Clock, o.QueueDelayMax = l, clk, time.Second
		o.Retries = worker.Retries{Default: worker.MustSchedule(worker.RetryScheduleDefault),
			ByChannel: map[string]worker.Schedule{"webhook": worker.MustSchedule(worker.RetryScheduleWebhookDefault)}}
	})
	quiet()
	// The receiver stays down for ten minutes; the sweeper runs every 30
	// simulated seconds. On the webhook schedule the rows are tried at 0,
	// ~30 s and ~5 min; the next retry, 30 min ±20% later, lands after the
	// expiring rows' expiry.
	for range 20 {
		clk.advance(30 * time.Second)
		sweepAll()
		quiet()
	}
	if err := b.SandboxClient.SetFaults(bg, sandbox.Faults{}); err != nil {
		t.Fatal(err)
	}
	clk.advance(40 * time.Minute)
	sweepAll()
	waitFor(t, "nothing is owed", func() bool { return read(t, l.Backlog).Owed == 0 })
	for i, r := range rows {
		d, _ := l.Get(bg, "acme", r.ID)
		want, sends := ledger.StateDelivered, 4
		if i%2 == 1 {
			want, sends = ledger.StateExpired, 3
		}
		if d.State != want || len(d.History) != sends {
			t.Errorf("row %d: %s with %d attempts (%s), want %s with %d", r.ID, d.State, len(d.History), d.LastError, want, sends)
		}
	}
	if q := b.queueStats(t); q.DeadLetterDepth != 0 {
		t.Errorf("dead letters: %d, want 0", q.DeadLetterDepth)
	}
}
