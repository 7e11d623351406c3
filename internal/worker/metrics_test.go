package worker_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// The send metrics carry the provider account and the channel: every
// routed pair's series exist at zero from the start, and each delivered
// send counts once on its pair with one duration observed.
func TestSendMetricsByProviderAndChannel(t *testing.T) {
	b := setup(t, stacktest.Options{})
	reg := prometheus.NewRegistry()
	b.Schedule(t, "acme", 3, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	b.start(t, func(o *worker.Options) { o.Metrics = worker.NewMetrics(reg) })
	b.waitSettled(t, 30*time.Second)
	name := b.Sender.Name()
	if v, _ := sample(t, reg, "owed_worker_send_attempts_total", "account", name, "channel", "sms", "outcome", "accepted"); v != 3 {
		t.Errorf("accepted sends of %s on sms = %v, want 3", name, v)
	}
	if _, n := sample(t, reg, "owed_provider_send_duration_seconds", "account", name, "channel", "sms", "outcome", "accepted"); n != 3 {
		t.Errorf("send durations of %s on sms observed %d times, want 3", name, n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "owed_worker_send_attempts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["channel"] == "email" && labels["outcome"] == "permanent" && labels["account"] == name {
				found = true
			}
			if len(labels) != 3 {
				t.Errorf("a send series with labels %v, want provider, channel and result alone", labels)
			}
		}
	}
	if !found {
		t.Errorf("no zero series for %s's permanent failures on email before any such send", name)
	}
}
