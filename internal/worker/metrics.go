package worker

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the worker's Prometheus series.
type Metrics struct {
	messages           *prometheus.CounterVec
	attempts           *prometheus.CounterVec
	lag                prometheus.Histogram
	rateLimited        prometheus.Counter
	duplicatesAbsorbed prometheus.Counter
	possibleDuplicates prometheus.Counter
	deadLettered       *prometheus.CounterVec
	inFlight           prometheus.Gauge
}

// messageOutcomes are the values of owed_worker_messages_total{outcome}.
var messageOutcomes = []string{"delivered", "skipped", "failed", "expired", "stale", "absorbed_duplicate",
	"held", "early", "retried", "rate_limited", "paced", "poison"}

// NewMetrics registers the worker's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics { return newMetrics(reg) }

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "owed_worker_messages_total",
			Help: "Queue messages handled, by outcome.",
		}, []string{"outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "owed_worker_send_attempts_total",
			Help: "Provider sends tried, by result: accepted, transient, permanent, rate_limited (not counted on the row).",
		}, []string{"result"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "owed_delivery_lag_seconds",
			Help:    "Time from a row's due_at to the provider accepting its send.",
			Buckets: []float64{.1, .25, .5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600},
		}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "owed_worker_provider_rate_limited_total",
			Help: "Provider 429 answers; each paused every worker sharing the account.",
		}),
		duplicatesAbsorbed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "owed_worker_duplicates_absorbed_total",
			Help: "Messages whose row was already settled: acked without a send.",
		}),
		possibleDuplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "owed_worker_possible_duplicate_resends_total",
			Help: "Sends of a row whose previous worker died mid-send; the provider may have accepted the first.",
		}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "owed_worker_dead_lettered_total",
			Help: "Messages sent to the dead letters, by reason: malformed, not_found, failed.",
		}, []string{"reason"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "owed_worker_sends_in_flight",
			Help: "Provider sends under way in this process.",
		}),
	}
	for _, o := range messageOutcomes {
		m.messages.WithLabelValues(o)
	}
	for _, r := range []string{"accepted", "transient", "permanent", "rate_limited"} {
		m.attempts.WithLabelValues(r)
	}
	for _, r := range []string{"malformed", "not_found", "failed"} {
		m.deadLettered.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.messages, m.attempts, m.lag, m.rateLimited, m.duplicatesAbsorbed,
			m.possibleDuplicates, m.deadLettered, m.inFlight)
	}
	return m
}

func (m *Metrics) outcome(o string) { m.messages.WithLabelValues(o).Inc() }
