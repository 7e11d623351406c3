package sweep

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/owedhq/owed/internal/ledger"
)

// Metrics are the sweep's Prometheus series.
type Metrics struct {
	runs        *prometheus.CounterVec
	rows        *prometheus.CounterVec
	duration    prometheus.Histogram
	lastSuccess prometheus.Gauge
}

// NewMetrics registers the sweep's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "owed_sweep_runs_total",
			Help: "Sweep runs by outcome: ok, incomplete (queue refused or budget hit), stalled (leased nothing while rows were owed).",
		}, []string{"outcome"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "owed_sweep_rows_total",
			Help: "Ledger rows handled by sweeps, by what happened: leased, published, republished, expired, released.",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "owed_sweep_duration_seconds",
			Help:    "Wall time of one sweep run.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "owed_sweep_last_success_timestamp_seconds",
			Help: "Unix time of the last sweep that completed.",
		}),
	}
	for _, o := range []string{"ok", "incomplete", "stalled"} {
		m.runs.WithLabelValues(o)
	}
	for _, r := range []string{"leased", "published", "republished", "expired", "released"} {
		m.rows.WithLabelValues(r)
	}
	reg.MustRegister(m.runs, m.rows, m.duration, m.lastSuccess)
	return m
}

// Observe records one run.
func (m *Metrics) Observe(r Result, now time.Time) {
	switch {
	case r.Stalled:
		m.runs.WithLabelValues("stalled").Inc()
	case !r.Complete:
		m.runs.WithLabelValues("incomplete").Inc()
	default:
		m.runs.WithLabelValues("ok").Inc()
		m.lastSuccess.Set(float64(now.Unix()))
	}
	m.rows.WithLabelValues("leased").Add(float64(r.Leased))
	m.rows.WithLabelValues("published").Add(float64(r.Published))
	m.rows.WithLabelValues("republished").Add(float64(r.Republished))
	m.rows.WithLabelValues("expired").Add(float64(r.Expired))
	m.rows.WithLabelValues("released").Add(float64(r.Released))
	m.duration.Observe(float64(r.DurationMS) / 1000)
}

// backlogCollector reads the ledger's backlog at scrape time, so the oldest
// owed age keeps rising when sweeps stop: a paused cron or a claim that
// matches nothing shows on the graph instead of freezing it.
type backlogCollector struct {
	ledger  *ledger.Ledger
	timeout time.Duration
	rows    *prometheus.Desc
	oldest  *prometheus.Desc
	up      *prometheus.Desc
}

// NewBacklogCollector returns a collector of owed_backlog_rows{state} and
// owed_oldest_owed_age_seconds.
func NewBacklogCollector(l *ledger.Ledger) prometheus.Collector {
	return &backlogCollector{
		ledger:  l,
		timeout: 5 * time.Second,
		rows: prometheus.NewDesc("owed_backlog_rows",
			"Unsettled ledger rows by state (pending, leased, queued, sending).", []string{"state"}, nil),
		oldest: prometheus.NewDesc("owed_oldest_owed_age_seconds",
			"Age of the oldest unsettled row that is already due; 0 when nothing due is owed.", nil, nil),
		up: prometheus.NewDesc("owed_backlog_scrape_success",
			"1 when the backlog could be read from the ledger at this scrape.", nil, nil),
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rows
	ch <- c.oldest
	ch <- c.up
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	b, err := c.ledger.Backlog(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, s := range []ledger.State{ledger.StatePending, ledger.StateLeased, ledger.StateQueued, ledger.StateSending} {
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(b.ByState[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, b.OldestOwedAge.Seconds())
}
