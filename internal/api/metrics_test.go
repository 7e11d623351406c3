package api

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Each /v1 request is counted and timed by its route's pattern and its
// status code, never by its path: a row's id in a label would make a
// series per row.
func TestRequestsAreCountedByRouteAndCode(t *testing.T) {
	b := setup(t)
	reg := prometheus.NewRegistry()
	b.handler = New(Options{Ledger: b.ledger, Tokens: b.tokens, ServiceToken: serviceToken, Log: zerolog.Nop(),
		Clock: b.clk, Metrics: reg})
	for _, id := range []string{"41", "42"} {
		if r := b.do(t, "GET", "/v1/notifications/"+id, b.acme, nil); r.status != http.StatusNotFound {
			t.Fatalf("GET a missing row: %d %s", r.status, r.body)
		}
	}
	if r := b.do(t, "GET", "/v1/notifications/41", "owed_wrong", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("GET with a wrong token: %d %s", r.status, r.body)
	}
	got := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			if c := m.GetCounter(); c != nil {
				got[key] = c.GetValue()
			} else if h := m.GetHistogram(); h != nil {
				got[key] = float64(h.GetSampleCount())
			}
		}
	}
	want := map[string]float64{
		"owed_api_requests_total code=401 route=GET /v1/notifications/{id}":           1,
		"owed_api_requests_total code=404 route=GET /v1/notifications/{id}":           2,
		"owed_api_request_duration_seconds code=401 route=GET /v1/notifications/{id}": 1,
		"owed_api_request_duration_seconds code=404 route=GET /v1/notifications/{id}": 2,
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
