package sweep

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus series of sweep runs (owed_sweep_*), fed one
// Result at a time by whoever runs the sweeps.
type Metrics struct {
	runs        *prometheus.CounterVec
	rows        *prometheus.CounterVec
	slices      prometheus.Counter
	heldBack    *prometheus.CounterVec
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
			Help: "Ledger rows handled by sweeps, by what happened: leased, requeued (leased because their lease ran out), published, republished, expired, released, set_aside (settled failed: no message could be built; counted for notify runs too).",
		}, []string{"outcome"}),
		slices: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "owed_sweep_slices_total",
			Help: "Lease statements of sweep runs that leased rows (each at most OWED_SWEEP_BATCH).",
		}),
		heldBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "owed_sweep_held_back_total",
			Help: "Sweep runs that stopped with rows still leasable, by reason: backpressure (the work outstanding reached the cap), budget (too little of OWED_SWEEP_BUDGET left).",
		}, []string{"reason"}),
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
	for _, r := range []string{"leased", "requeued", "published", "republished", "expired", "released", "set_aside"} {
		m.rows.WithLabelValues(r)
	}
	for _, r := range []string{HeldBackpressure, HeldBudget} {
		m.heldBack.WithLabelValues(r)
	}
	reg.MustRegister(m.runs, m.rows, m.slices, m.heldBack, m.duration, m.lastSuccess)
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
	m.rows.WithLabelValues("requeued").Add(float64(r.Requeued))
	m.rows.WithLabelValues("published").Add(float64(r.Published))
	m.rows.WithLabelValues("republished").Add(float64(r.Republished))
	m.rows.WithLabelValues("expired").Add(float64(r.Expired))
	m.rows.WithLabelValues("released").Add(float64(r.Released))
	m.CountSetAside(r.SetAside)
	m.slices.Add(float64(r.Slices))
	if r.HeldBack != "" {
		m.heldBack.WithLabelValues(r.HeldBack).Inc()
	}
	m.duration.Observe(float64(r.DurationMS) / 1000)
}

// CountSetAside counts rows a run set aside; the notify runs, which Observe
// does not record, call it too.
func (m *Metrics) CountSetAside(n int) { m.rows.WithLabelValues("set_aside").Add(float64(n)) }
