package benchutil

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

const workerMetrics = `# HELP owed_worker_messages_total Queue messages handled, by outcome.
# TYPE owed_worker_messages_total counter
owed_worker_messages_total{outcome="delivered"} 40
owed_worker_messages_total{outcome="paced"} 12
owed_worker_messages_total{outcome="rate_limited"} 2
owed_worker_send_attempts_total{outcome="accepted"} 40
`

func TestParseReceivesAddsEveryOutcome(t *testing.T) {
	r, err := ParseReceives(strings.NewReader(workerMetrics))
	if err != nil {
		t.Fatal(err)
	}
	if r.Received != 54 || r.Delivered != 40 {
		t.Fatalf("ParseReceives = %+v, want 54 received, 40 delivered", r)
	}
	if got := r.Sub(Receives{Received: 4, Delivered: 0}).PerDelivery(); got != 1.25 {
		t.Errorf("PerDelivery of the window = %v, want 1.25", got)
	}
}

func TestParseReceivesRefusesAPageWithoutTheCounter(t *testing.T) {
	if _, err := ParseReceives(strings.NewReader("go_goroutines 12\n")); err == nil {
		t.Fatal("ParseReceives accepted a page without owed_worker_messages_total")
	}
}

func TestGatherReceivesMatchesTheText(t *testing.T) {
	reg := prometheus.NewRegistry()
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: messagesMetric, Help: "h"}, []string{"outcome"})
	reg.MustRegister(v)
	v.WithLabelValues("delivered").Add(40)
	v.WithLabelValues("paced").Add(12)
	v.WithLabelValues("rate_limited").Add(2)
	r, err := GatherReceives(reg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Received != 54 || r.Delivered != 40 {
		t.Fatalf("GatherReceives = %+v, want 54 received, 40 delivered", r)
	}
}
