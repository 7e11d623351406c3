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
	keyMismatches      prometheus.Counter
	deadLettered       *prometheus.CounterVec
	inFlight           prometheus.Gauge
}

// messageOutcomes are the values of owed_worker_messages_total{outcome}.
var messageOutcomes = []string{"delivered", "skipped", "failed", "expired", "stale", "absorbed_duplicate",
	"held", "early", "retried", "rate_limited", "paced", "poison", "claim_lost"}

// NewMetrics registers the worker's series on reg; with a nil reg they are
// kept but not exported.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		messages: counterVec("owed_worker_messages_total", "Queue messages handled, by outcome.",
			"outcome", messageOutcomes...),
		attempts: counterVec("owed_worker_send_attempts_total",
			"Provider sends tried, by result: accepted, transient, permanent, rate_limited (not counted on the row).",
			"result", "accepted", "transient", "permanent", "rate_limited"),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "owed_delivery_lag_seconds",
			Help:    "Time from a row's due_at to the provider accepting its send.",
			Buckets: []float64{.1, .25, .5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600},
		}),
		rateLimited: counter("owed_worker_provider_rate_limited_total",
			"Provider 429 answers; each paused every worker sharing the account."),
		duplicatesAbsorbed: counter("owed_worker_duplicates_absorbed_total",
			"Messages whose row was already settled: acked without a send."),
		possibleDuplicates: counter("owed_worker_possible_duplicate_resends_total",
			"Sends of a row whose previous worker died mid-send; the provider may have accepted the first."),
		keyMismatches: counter("owed_worker_key_mismatches_total",
			"Messages whose idempotency key was not their row's (forged, or a prefix unlike the sweeper's); sent with the row's key."),
		deadLettered: counterVec("owed_worker_dead_lettered_total",
			"Messages sent to the dead letters, by reason: malformed, invalid (the ledger refuses it), not_found, failed.",
			"reason", "malformed", "invalid", "not_found", "failed"),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "owed_worker_sends_in_flight",
			Help: "Provider sends under way in this process.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.messages, m.attempts, m.lag, m.rateLimited, m.duplicatesAbsorbed,
			m.possibleDuplicates, m.keyMismatches, m.deadLettered, m.inFlight)
	}
	return m
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// counterVec returns a counter with one label whose known values are
// created at zero, so a dashboard sees every series before it first counts.
func counterVec(name, help, label string, values ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	for _, value := range values {
		v.WithLabelValues(value)
	}
	return v
}

func (m *Metrics) outcome(o string) { m.messages.WithLabelValues(o).Inc() }
