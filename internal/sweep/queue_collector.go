package sweep

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/owedhq/owed/internal/queue"
)

// queueStatsTimeout bounds one scrape's call to the queue's stats endpoint,
// so a slow queue makes the scrape report failure instead of hanging
// Prometheus past its own scrape timeout.
const queueStatsTimeout = 5 * time.Second

// queueCollector reads the queue's depths at scrape time. The dead-letter
// depth lives only in the queue, not in the ledger, so the on-call alert on
// it needs a series the sweeper exports; reading at scrape time keeps the
// value current even when no sweep runs.
type queueCollector struct {
	stats      func(context.Context) (queue.Stats, error)
	timeout    time.Duration
	deadLetter *prometheus.Desc
	visible    *prometheus.Desc
	inFlight   *prometheus.Desc
	delayed    *prometheus.Desc
	oldest     *prometheus.Desc
	up         *prometheus.Desc
}

// NewQueueCollector returns a collector of owed_queue_dead_letter_depth,
// owed_queue_visible_messages, owed_queue_in_flight_messages,
// owed_queue_delayed_messages and owed_queue_oldest_age_seconds, each read
// from stats (usually (*queue.Client).Stats) when Prometheus scrapes, plus
// owed_queue_scrape_success saying whether that read worked.
func NewQueueCollector(stats func(ctx context.Context) (queue.Stats, error)) prometheus.Collector {
	return &queueCollector{
		stats:   stats,
		timeout: queueStatsTimeout,
		deadLetter: prometheus.NewDesc("owed_queue_dead_letter_depth",
			"Messages in the queue's dead letters, waiting for on-call (owedctl dlq list).", nil, nil),
		visible: prometheus.NewDesc("owed_queue_visible_messages",
			"Messages ready to be consumed.", nil, nil),
		inFlight: prometheus.NewDesc("owed_queue_in_flight_messages",
			"Messages consumed and not yet acked, nacked or timed out.", nil, nil),
		delayed: prometheus.NewDesc("owed_queue_delayed_messages",
			"Messages published with a delay (or nacked with one) that are not visible yet.", nil, nil),
		oldest: prometheus.NewDesc("owed_queue_oldest_age_seconds",
			"Age of the oldest message in the queue.", nil, nil),
		up: prometheus.NewDesc("owed_queue_scrape_success",
			"1 when the queue's stats could be read at this scrape.", nil, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.deadLetter, c.visible, c.inFlight, c.delayed, c.oldest, c.up} {
		ch <- d
	}
}

// Collect reports only the success gauge when the read fails: a stale or
// zero depth would read as "no dead letters" and silence the alert.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s, err := c.stats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.deadLetter, prometheus.GaugeValue, float64(s.DeadLetterDepth))
	ch <- prometheus.MustNewConstMetric(c.visible, prometheus.GaugeValue, float64(s.Visible))
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight))
	ch <- prometheus.MustNewConstMetric(c.delayed, prometheus.GaugeValue, float64(s.Delayed))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestAgeSeconds)
}
