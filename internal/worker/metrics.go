package worker

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/owedhq/owed/internal/pace"
)

// Metrics are the worker's Prometheus series.
type Metrics struct {
	messages           *prometheus.CounterVec
	attempts           *prometheus.CounterVec
	sendDuration       *prometheus.HistogramVec
	lag                prometheus.Histogram
	rateLimited        *prometheus.CounterVec
	duplicatesAbsorbed prometheus.Counter
	possibleDuplicates prometheus.Counter
	keyMismatches      prometheus.Counter
	deadLettered       *prometheus.CounterVec
	failed             *prometheus.CounterVec
	inFlight           *prometheus.GaugeVec
	accountErrors      *prometheus.CounterVec
	accountPaused      *prometheus.GaugeVec
	operatorPauses     *prometheus.GaugeVec
	handedBack         prometheus.Counter

	// mu guards paused: the reason each open account's gauge carries, so
	// the series goes when the circuit closes or its reason changes.
	mu     sync.Mutex
	paused map[string]string
}

// messageOutcomes are the values of owed_worker_messages_total{outcome}.
var messageOutcomes = []string{"delivered", "skipped", "failed", "expired", "stale", "absorbed_duplicate",
	"held", "early", "retried", "rate_limited", "paced", "poison", "claim_lost", "account_paused", "unrouted",
	"tenant_paused", "account_held", "recipient_limited"}

// sendResults are the values of owed_worker_send_attempts_total{outcome}
// and owed_provider_send_duration_seconds{outcome}: how a provider answered a
// send (expired: the adapter sent nothing, too little of the row's
// validity was left).
var sendResults = []string{"accepted", "transient", "permanent", "rate_limited", "account", "expired"}

// sendBuckets are owed_provider_send_duration_seconds' buckets: from a
// provider answering in a few milliseconds to OWED_SEND_TIMEOUT's default
// (15 s) and beyond.
var sendBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 30}

// failureCauses are the values of owed_worker_failed_total{reason}: a
// recipient's permanent failure (recorded, not dead-lettered, not paged),
// another permanent failure, attempts exhausted, an unreadable payload.
var failureCauses = []string{"recipient", "permanent", "exhausted", "payload"}

// NewMetrics registers the worker's series on reg; with a nil reg they are
// kept but not exported.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		messages: counterVec("owed_worker_messages_total", "Queue messages handled, by outcome.",
			"outcome", messageOutcomes...),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owed_worker_send_attempts_total",
			Help: "Provider sends tried, by provider account, channel and outcome: accepted, transient, permanent, rate_limited and account (neither counted on the row), expired (nothing sent)."},
			sendLabels("outcome")),
		sendDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "owed_provider_send_duration_seconds",
			Help:    "How long a provider took to answer a send, by provider account, channel and outcome (as owed_worker_send_attempts_total's).",
			Buckets: sendBuckets}, sendLabels("outcome")),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "owed_delivery_lag_seconds",
			Help:    "Time from a row's due_at to the provider accepting its send.",
			Buckets: []float64{.1, .25, .5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600},
		}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owed_worker_provider_rate_limited_total",
			Help: "Provider rate-limited answers, by provider account and channel; each paused every worker sharing the account, unless the provider scoped it to the recipient (then only that recipient waits: outcome recipient_limited)."},
			sendLabels()),
		duplicatesAbsorbed: counter("owed_worker_duplicates_absorbed_total",
			"Messages whose row was already settled: acked without a send."),
		possibleDuplicates: counter("owed_worker_possible_duplicate_resends_total",
			"Sends of a row whose previous worker died mid-send; the provider may have accepted the first."),
		keyMismatches: counter("owed_worker_key_mismatches_total",
			"Messages whose idempotency key was not their row's (forged, or a prefix unlike the sweeper's); sent with the row's key."),
		deadLettered: counterVec("owed_worker_dead_lettered_total",
			"Messages sent to the dead letters, by reason: malformed, invalid (the ledger refuses it), not_found, failed.",
			"reason", "malformed", "invalid", "not_found", "failed"),
		failed: counterVec("owed_worker_failed_total",
			"Rows settled failed, by reason: recipient (the provider's permanent answer about the recipient; not dead-lettered), permanent, exhausted, payload.",
			"reason", failureCauses...),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "owed_worker_sends_in_flight",
			Help: "Provider sends under way in this process, by provider account and channel.",
		}, sendLabels()),
		accountErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "owed_provider_account_errors_total",
			Help: "Account-level provider errors (expired credential, no credit, suspended account), by account; each paused the account.",
		}, []string{"account"}),
		accountPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "owed_provider_account_paused",
			Help: "1 while the provider account's circuit is open (an account error paused every send on it), by account and the provider's reason, as this process last read it.",
		}, []string{"account", "reason"}),
		operatorPauses: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "owed_worker_operator_pauses",
			Help: "Operator pauses as this process last read them, by kind: tenant (paused tenants) and account (held provider accounts).",
		}, []string{"kind"}),
		handedBack: counter("owed_worker_handed_back_total",
			"Rows whose wait was longer than OWED_QUEUE_DELAY_MAX, or had no known end (an operator pause), handed back to the ledger until their not-before time, their message acked."),
		paused: map[string]string{},
	}
	m.operatorPauses.WithLabelValues("tenant")
	m.operatorPauses.WithLabelValues("account")
	if reg != nil {
		reg.MustRegister(m.messages, m.attempts, m.sendDuration, m.lag, m.rateLimited, m.duplicatesAbsorbed,
			m.possibleDuplicates, m.keyMismatches, m.deadLettered, m.failed, m.inFlight, m.accountErrors,
			m.accountPaused, m.operatorPauses, m.handedBack)
	}
	return m
}

// account records what this process last read of an account's circuit:
// the gauge is 1 with the reason while it is open, and absent once closed.
func (m *Metrics) account(s pace.AccountState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, had := m.paused[s.Account]
	if had && old != s.Reason {
		m.accountPaused.DeleteLabelValues(s.Account, old)
		delete(m.paused, s.Account)
	}
	if s.Open() {
		m.accountPaused.WithLabelValues(s.Account, s.Reason).Set(1)
		m.paused[s.Account] = s.Reason
	}
}

// sendLabels are the send metrics' labels: the provider account (the
// Sender's Name(), as the pace and the circuit name it: one per configured
// provider) and the channel (payload.Channels()), then extra. No tenant or
// recipient: the series stay as few as the providers configured.
func sendLabels(extra ...string) []string { return append([]string{"account", "channel"}, extra...) }

// route creates the send series of a provider account on a channel at
// zero, so a dashboard sees them before the first send.
func (m *Metrics) route(account, channel string) {
	for _, r := range sendResults {
		m.attempts.WithLabelValues(account, channel, r)
	}
	m.rateLimited.WithLabelValues(account, channel)
	m.inFlight.WithLabelValues(account, channel)
}

// sent counts one send of account on channel by its result, and how long
// the provider took to answer it.
func (m *Metrics) sent(account, channel, result string, took time.Duration) {
	m.attempts.WithLabelValues(account, channel, result).Inc()
	m.sendDuration.WithLabelValues(account, channel, result).Observe(took.Seconds())
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
