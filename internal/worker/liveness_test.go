package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// healthz asks w's /healthz and returns its status and body.
func healthz(w *worker.Worker) (int, string) {
	rec := httptest.NewRecorder()
	w.HealthzOnly().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return rec.Code, rec.Body.String()
}

// waitHealth polls w's /healthz until it answers code, failing after a
// minute, and returns the body.
func waitHealth(t *testing.T, w *worker.Worker, code int) string {
	t.Helper()
	var body string
	waitFor(t, "/healthz answers "+http.StatusText(code), func() bool {
		var got int
		got, body = healthz(w)
		return got == code
	})
	return body
}

// wedged is a provider whose sends hang, deaf to their context, until
// released: a worker stuck on a lock or a dead connection.
type wedged struct {
	provider.Sender
	release chan struct{}
	entered atomic.Int64
}

func (s *wedged) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	s.entered.Add(1)
	<-s.release
	return s.Sender.Send(context.WithoutCancel(ctx), d)
}

// startWorker builds and starts a worker with change applied, stopped when
// the test ends.
func startWorker(t *testing.T, b *bundle, change func(o *worker.Options)) *worker.Worker {
	t.Helper()
	w := b.newWorker(t, change)
	if err := w.Start(bg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// A worker whose every sender hangs with a message in hand answers /healthz
// 503 with the reason once it made no progress for OWED_WORKER_STALL_AFTER,
// and 200 again once the sends come back.
func TestAWedgedWorkerIsUnhealthy(t *testing.T) {
	b := setup(t, stacktest.Options{})
	s := &wedged{Sender: b.Sender, release: make(chan struct{})}
	b.Schedule(t, "acme", 2, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	w := startWorker(t, b, func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return s, nil }
		o.Concurrency, o.StallAfter = 1, 300*time.Millisecond
	})
	defer close(s.release)
	waitFor(t, "the send hangs", func() bool { return s.entered.Load() > 0 })
	body := waitHealth(t, w, http.StatusServiceUnavailable)
	if !strings.Contains(body, "none finished") || !strings.Contains(body, "OWED_WORKER_STALL_AFTER") || strings.Count(body, "\n") != 1 {
		t.Errorf("stalled /healthz body %q, want one line saying no message finished", body)
	}
	s.release <- struct{}{}
	s.release <- struct{}{}
	waitHealth(t, w, http.StatusOK)
	b.waitSettled(t, 30*time.Second)
}

// stuckPace is a pace whose reading hangs until the worker stops: a
// database pool with no connection left.
type stuckPace struct {
	stacktest.Unpaced
	asked atomic.Int64
}

func (p *stuckPace) Next(ctx context.Context) (time.Duration, time.Duration, error) {
	p.asked.Add(1)
	<-ctx.Done()
	return 0, 0, ctx.Err()
}

// A receive loop stuck on the pace is unhealthy too, with no message in
// hand.
func TestAStuckReceiveLoopIsUnhealthy(t *testing.T) {
	b := setup(t, stacktest.Options{})
	p := &stuckPace{}
	w := startWorker(t, b, func(o *worker.Options) {
		o.Pace = func(string) worker.Pacer { return p }
		o.StallAfter = 300 * time.Millisecond
	})
	waitFor(t, "the pace is asked", func() bool { return p.asked.Load() > 0 })
	if body := waitHealth(t, w, http.StatusServiceUnavailable); !strings.Contains(body, "reading the pace") {
		t.Errorf("stalled /healthz body %q, want it to name the pace", body)
	}
}

// An idle worker on an empty queue stays healthy through its long polls,
// each far longer than its OWED_WORKER_STALL_AFTER here.
func TestAnIdleWorkerStaysHealthy(t *testing.T) {
	b := setup(t, stacktest.Options{})
	q := &countingQueue{Queue: b.Queue}
	w := startWorker(t, b, func(o *worker.Options) {
		o.Queue, o.StallAfter = q, 300*time.Millisecond
	})
	// A third receive began, so two empty ones came back: whole long polls
	// ran while /healthz was asked all along.
	waitFor(t, "two empty receives", func() bool {
		if code, body := healthz(w); code != http.StatusOK {
			t.Fatalf("idle worker's /healthz: %d %s", code, body)
		}
		return q.calls.Load() >= 3
	})
}
