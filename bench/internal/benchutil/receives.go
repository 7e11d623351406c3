package benchutil

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// messagesMetric is the worker's counter of queue messages handled, by
// outcome. Every message a worker receives ends in exactly one outcome
// (delivered, paced, rate_limited, held, …), so the sum over outcomes is
// the receives the workers handled, on every backend, and the "delivered"
// series the deliveries. Messages still held when a worker stops are not
// counted: a benchmark reads the counter while the workers run.
const messagesMetric = "owed_worker_messages_total"

// Receives is what the workers' messages counter says.
type Receives struct {
	// Received is every outcome's count: the messages received and handled.
	Received float64
	// Delivered is the "delivered" outcome's.
	Delivered float64
}

// Add returns r plus o (several workers).
func (r Receives) Add(o Receives) Receives {
	return Receives{Received: r.Received + o.Received, Delivered: r.Delivered + o.Delivered}
}

// Sub returns r minus an earlier reading o (a measured window).
func (r Receives) Sub(o Receives) Receives {
	return Receives{Received: r.Received - o.Received, Delivered: r.Delivered - o.Delivered}
}

// PerDelivery is receives per delivered message; 0 when nothing was
// delivered.
func (r Receives) PerDelivery() float64 {
	if r.Delivered == 0 {
		return 0
	}
	return r.Received / r.Delivered
}

// ParseReceives reads the counter from a worker's /metrics (Prometheus
// text format).
func ParseReceives(body io.Reader) (Receives, error) {
	var r Receives
	seen := false
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		// owed_worker_messages_total{outcome="delivered"} 5000
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, messagesMetric+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return r, fmt.Errorf("%s: unreadable line %q", messagesMetric, line)
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return r, fmt.Errorf("%s: unreadable line %q", messagesMetric, line)
		}
		r.count(labels == `outcome="delivered"`, v)
		seen = true
	}
	if err := sc.Err(); err != nil {
		return r, err
	}
	if !seen {
		return r, fmt.Errorf("no %s series: is this a worker's /metrics?", messagesMetric)
	}
	return r, nil
}

// GatherReceives reads the counter from an in-process worker's registry.
func GatherReceives(g prometheus.Gatherer) (Receives, error) {
	var r Receives
	families, err := g.Gather()
	if err != nil {
		return r, err
	}
	for _, f := range families {
		if f.GetName() != messagesMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			delivered := false
			for _, l := range m.GetLabel() {
				delivered = delivered || (l.GetName() == "outcome" && l.GetValue() == "delivered")
			}
			r.count(delivered, m.GetCounter().GetValue())
		}
		return r, nil
	}
	return r, fmt.Errorf("no %s series in the registry: pass worker.NewMetrics(registry) to the workers", messagesMetric)
}

func (r *Receives) count(delivered bool, v float64) {
	r.Received += v
	if delivered {
		r.Delivered += v
	}
}
