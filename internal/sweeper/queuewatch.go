package sweeper

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/queue"
)

// The scheduling API needs only Postgres, so the queue is not part of the
// sweeper's readiness: a queue outage must not take /v1 out of the load
// balancer. Its state shows instead in owed_queue_up and
// owed_queue_last_publish_error_timestamp_seconds, and in the answer of the
// sweep that met it (queue_error). Rows a sweep could not publish stay
// owed and are published by a later sweep.

// queueWatch is the sweeper's queue: every publish and stats read goes
// through it, and it remembers whether the last one reached the queue.
type queueWatch struct {
	queue.Queue
	clock clock.Clock
	// stats is the server's cached stats read, made at each scrape so
	// owed_queue_up is current even when no sweep runs.
	stats func(context.Context) (queue.Stats, error)

	mu        sync.Mutex
	up        bool
	lastError time.Time

	upDesc, lastErrorDesc *prometheus.Desc
}

func newQueueWatch(q queue.Queue, clk clock.Clock) *queueWatch {
	return &queueWatch{Queue: q, clock: clk, up: true,
		upDesc: prometheus.NewDesc("owed_queue_up",
			"1 when the sweeper's last call to the queue (a publish or a stats read) reached it, else 0. "+
				"The queue is not part of /readyz: the scheduling API needs only Postgres.", nil, nil),
		lastErrorDesc: prometheus.NewDesc("owed_queue_last_publish_error_timestamp_seconds",
			"When a sweep's publish last failed (Unix seconds); 0 since start-up if never.", nil, nil),
	}
}

// publishErrKey carries a run's publishErr through its context.
type publishErrKey struct{}

// publishErr is the first publish error of one sweep run.
type publishErr struct {
	mu  sync.Mutex
	err error
}

func (p *publishErr) get() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// withPublishErr returns ctx carrying a fresh publishErr for one run.
func withPublishErr(ctx context.Context) (context.Context, *publishErr) {
	p := &publishErr{}
	return context.WithValue(ctx, publishErrKey{}, p), p
}

// Publish records the call's outcome. A backend may report an outage as a
// refusal of every message rather than as the call's error (the REST
// client does), so a publish whose every message was refused counts as the
// queue being down; the run's answer names the first refusal either way.
func (w *queueWatch) Publish(ctx context.Context, msgs []queue.Message) ([]queue.PublishResult, error) {
	res, err := w.Queue.Publish(ctx, msgs)
	failed, refused := err, 0
	for _, r := range res {
		if r.Err != nil {
			refused++
			if failed == nil {
				failed = r.Err
			}
		}
	}
	down := err
	if down == nil && refused > 0 && refused == len(res) {
		down = failed
	}
	w.observe(ctx, down, true)
	if p, _ := ctx.Value(publishErrKey{}).(*publishErr); p != nil && failed != nil {
		p.mu.Lock()
		if p.err == nil {
			p.err = failed
		}
		p.mu.Unlock()
	}
	return res, err
}

func (w *queueWatch) Stats(ctx context.Context) (queue.Stats, error) {
	s, err := w.Queue.Stats(ctx)
	w.observe(ctx, err, false)
	return s, err
}

// observe records a call's outcome. A call cut short by its own context (a
// sweep's budget, a scrape's timeout, shutdown) says nothing about the
// queue.
func (w *queueWatch) observe(ctx context.Context, err error, publish bool) {
	if err != nil && ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.up = err == nil
	if err != nil && publish {
		w.lastError = w.clock.Now()
	}
}

func (w *queueWatch) Describe(ch chan<- *prometheus.Desc) {
	ch <- w.upDesc
	ch <- w.lastErrorDesc
}

func (w *queueWatch) Collect(ch chan<- prometheus.Metric) {
	if w.stats != nil {
		ctx, cancel := context.WithTimeout(context.Background(), queueStatsTimeout)
		w.stats(ctx)
		cancel()
	}
	w.mu.Lock()
	up, last := w.up, w.lastError
	w.mu.Unlock()
	v := 0.0
	if up {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(w.upDesc, prometheus.GaugeValue, v)
	ts := 0.0
	if !last.IsZero() {
		ts = float64(last.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(w.lastErrorDesc, prometheus.GaugeValue, ts)
}
