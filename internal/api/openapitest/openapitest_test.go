package openapitest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/api/openapitest"
)

// TestCheckCatchesDrift: each kind of drift the checker exists for is
// reported.
func TestCheckCatchesDrift(t *testing.T) {
	s, err := openapitest.Load(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	hdr := func() http.Header {
		return http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"r1"}}
	}
	get := func(target string) *http.Request {
		r := httptest.NewRequest("GET", target, nil)
		r.Header.Set("Authorization", "Bearer t")
		return r
	}
	good := `{"data":{"notifications":[],"limit":500}}`
	for name, x := range map[string]openapitest.Exchange{
		"undocumented status": {Request: get("/v1/notifications"), Status: 418, Header: hdr(), Body: []byte(good)},
		"body off its schema": {Request: get("/v1/notifications"), Status: 200, Header: hdr(), Body: []byte(`{"data":{"limit":500}}`)},
		"undocumented error code": {Request: get("/v1/notifications"), Status: 400, Header: hdr(),
			Body: []byte(`{"error":{"code":"conflict","message":"m"}}`)},
		"no request id": {Request: get("/v1/notifications"), Status: 200,
			Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(good)},
		"refused request answered 200": {Request: get("/v1/notifications?limit=0"), Status: 200, Header: hdr(), Body: []byte(good)},
		"unknown route answered 200":   {Request: get("/v1/nope"), Status: 200, Header: hdr(), Body: []byte(good)},
		"429 without Retry-After": {Request: get("/v1/notifications"), Status: 429, Header: hdr(),
			Body: []byte(`{"error":{"code":"rate_limited","message":"m"}}`)},
		"429 with a Retry-After off its schema": {Request: get("/v1/notifications"), Status: 429,
			Header: func() http.Header { h := hdr(); h.Set("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"); return h }(),
			Body:   []byte(`{"error":{"code":"rate_limited","message":"m"}}`)},
	} {
		if err := s.Check(x); err == nil {
			t.Errorf("%s: not reported", name)
		}
	}
	if err := s.Check(openapitest.Exchange{Request: get("/v1/notifications"), Status: 200, Header: hdr(),
		Body: []byte(good)}); err != nil {
		t.Errorf("a documented exchange: %v", err)
	}
	if miss := s.Unexercised("/v1/"); len(miss) == 0 || strings.Contains(strings.Join(miss, ","), "GET /v1/notifications 200,") {
		t.Errorf("unexercised %v: want every outcome but the one checked", miss)
	}
}
