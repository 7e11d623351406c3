package api

import (
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/tenant"
)

// limited gives b a handler with lim, on b's clock.
func (b *bundle) limited(lim *Limiter) {
	b.handler = New(Options{Ledger: b.ledger, Tokens: b.tokens, ServiceToken: serviceToken, Log: zerolog.New(b.logs),
		Clock: b.clk, Limits: lim})
}

// expectLimited fails unless r is the 429 of tenant over limit, with a
// Retry-After of want seconds.
func expectLimited(t *testing.T, r response, tenant string, want int) {
	t.Helper()
	expect(t, r, http.StatusTooManyRequests)
	if got := r.header.Get("Retry-After"); got != fmt.Sprint(want) {
		t.Errorf("Retry-After %q, want %d", got, want)
	}
	if e := r.apiErr(t); e.Code != codeRateLimited || !strings.Contains(e.Message, fmt.Sprintf("%q", tenant)) {
		t.Errorf("error %+v, want %s naming tenant %q", e, codeRateLimited, tenant)
	}
}

// refusals reads owed_api_rate_limited_total{tenant,limit} of lim.
func refusals(t *testing.T, lim *Limiter, tenant, limit string) float64 {
	t.Helper()
	var m dto.Metric
	if err := lim.refused.WithLabelValues(tenant, limit).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func override(rate float64, rows int64) LimitOverride {
	return LimitOverride{Rate: &rate, RowsPerMinute: &rows}
}

// Issue 25: a tenant over its request rate is answered 429 with
// Retry-After, on every route, whichever token acts for it, and writes
// nothing; meanwhile another tenant is served as if nothing happened, and
// the tenant is served again once its bucket refills. Each refusal is
// counted by tenant.
func TestTenantOverItsRequestRateIs429(t *testing.T) {
	b := setup(t)
	lim := NewLimiter(Limits{Rate: 2, RowsPerMinute: 1000}, LimitOverrides{"globex": override(1000, 0)})
	b.limited(lim)
	due := b.clk.Now().Add(time.Hour)
	list := "/v1/notifications?limit=1"
	expect(t, b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", due))), http.StatusOK)
	expect(t, b.do(t, "GET", list, b.acme, nil), http.StatusOK)

	// The bucket is empty: every route refuses acme for a second.
	event := map[string]any{"kind": "shipment", "ref_id": "S-1", "channel": "sms", "payload": map[string]any{"text": "hi"},
		"occurred_at": due.Format(time.RFC3339), "recipients": []map[string]any{{"recipient": "+15550001"}}}
	subject := map[string]any{"kind": "follow_up", "ref_id": "T-1"}
	calls := []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/notifications", batch(note("+15550002", "T-1", due))},
		{"GET", list, nil},
		{"GET", "/v1/notifications/1", nil},
		{"POST", "/v1/notifications/cancel", subject},
		{"POST", "/v1/notifications/reschedule", map[string]any{"kind": "follow_up", "ref_id": "T-1", "delay_seconds": 60}},
		{"POST", "/v1/events", event},
		{"POST", "/v1/recipients/erase", map[string]any{"recipient": "+15550001", "reason": "r"}},
		{"PATCH", "/v1/notifications/1", map[string]any{"payload": map[string]any{"text": "hi"}}},
		{"PUT", "/v1/quiet-hours", map[string]any{"scope": "tenant", "windows": []string{"mon-fri 08:00-20:00"}}},
		{"PUT", "/v1/digests", map[string]any{"kind": "follow_up", "window": "10m"}},
		{"GET", "/v1/digests", nil},
		{"GET", "/v1/quiet-hours", nil},
		{"PATCH", "/v1/notifications", map[string]any{"key": map[string]any{"recipient": "+15550001", "kind": "follow_up",
			"ref_id": "T-1", "due_at": due.Format(time.RFC3339)}, "payload": map[string]any{"text": "hi"}}},
	}
	for _, c := range calls {
		expectLimited(t, b.do(t, c.method, c.path, b.acme, c.body), "acme", 1)
	}
	// The service token acting for acme is charged to acme too.
	expectLimited(t, b.do(t, "GET", list+"&tenant=acme", serviceToken, nil), "acme", 1)
	expectLimited(t, b.do(t, "POST", "/v1/events", serviceToken, withTenant(event, "acme")), "acme", 1)
	if n := b.count(t, "acme"); n != 1 {
		t.Fatalf("acme has %d rows, want only the one scheduled before the limit", n)
	}
	if got := refusals(t, lim, "acme", limitRequests); got != float64(len(calls)+2) {
		t.Errorf("owed_api_rate_limited_total{tenant=acme,limit=requests} = %v, want %d", got, len(calls)+2)
	}

	// globex, at the same instant, is not slowed by acme at all.
	for range 50 {
		expect(t, b.do(t, "GET", list, b.globex, nil), http.StatusOK)
	}
	expect(t, b.do(t, "POST", "/v1/events", b.globex, event), http.StatusOK)

	// A refusal takes no token: a second later acme's bucket holds two
	// requests again, whatever it sent meanwhile.
	b.clk.Advance(time.Second)
	expect(t, b.do(t, "GET", list, b.acme, nil), http.StatusOK)
	expect(t, b.do(t, "POST", "/v1/notifications/cancel", b.acme, subject), http.StatusOK)
	expectLimited(t, b.do(t, "GET", list, b.acme, nil), "acme", 1)
	if got := refusals(t, lim, "globex", limitRequests); got != 0 {
		t.Errorf("globex counted %v refusals, want 0", got)
	}
}

func withTenant(body map[string]any, tenant string) map[string]any {
	out := map[string]any{"tenant_id": tenant}
	for k, v := range body {
		out[k] = v
	}
	return out
}

// Issue 25: rows scheduled (a schedule's rows, an event's recipients) are
// bounded per minute per tenant: a tenant that used its minute's rows is
// refused until enough have refilled for the request, with Retry-After
// saying when, and another tenant schedules meanwhile.
func TestTenantOverItsRowsPerMinuteIs429(t *testing.T) {
	b := setup(t)
	lim := NewLimiter(Limits{Rate: 1000, RowsPerMinute: 1200}, nil)
	b.limited(lim)
	due := b.clk.Now().Add(time.Hour)
	rows := func(prefix string, n int) map[string]any {
		var ns []map[string]any
		for i := range n {
			ns = append(ns, note(fmt.Sprintf("+1555%07d", i), prefix, due))
		}
		return batch(ns...)
	}
	expect(t, b.do(t, "POST", "/v1/notifications", b.acme, rows("A-1", 1000)), http.StatusOK)
	// 200 left; 300 more need 100 rows' refill: 5 s at 20 rows a second.
	expectLimited(t, b.do(t, "POST", "/v1/notifications", b.acme, rows("A-2", 300)), "acme", 5)
	if got := refusals(t, lim, "acme", limitRows); got != 1 {
		t.Errorf("owed_api_rate_limited_total{tenant=acme,limit=rows} = %v, want 1", got)
	}
	// A request that schedules nothing is not charged for rows.
	expect(t, b.do(t, "GET", "/v1/notifications?limit=1", b.acme, nil), http.StatusOK)
	expect(t, b.do(t, "POST", "/v1/notifications", b.globex, rows("G-1", 1000)), http.StatusOK)
	b.clk.Advance(5 * time.Second)
	expect(t, b.do(t, "POST", "/v1/notifications", b.acme, rows("A-2", 300)), http.StatusOK)
	var n int
	if err := tenant.InTx(ctx, b.db.App, "acme", func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT count(*) FROM owed_notifications`).Scan(&n)
	}); err != nil || n != 1300 {
		t.Errorf("acme has %d rows (%v), want 1300", n, err)
	}
}

func TestLimitOverridesParse(t *testing.T) {
	var o LimitOverrides
	if err := o.Decode(" acme:rate=50,rows=100000 ; globex:rows=0;team:eu:rate=0.5; "); err != nil {
		t.Fatal(err)
	}
	if got := o.String(); got != "acme:rate=50,rows=100000;globex:rows=0;team:eu:rate=0.5" {
		t.Errorf("parsed as %q", got)
	}
	lim := NewLimiter(Limits{Rate: 10, RowsPerMinute: 5000}, o)
	for id, want := range map[string]Limits{"acme": {50, 100000}, "globex": {10, 0}, "team:eu": {0.5, 5000},
		"other": {10, 5000}} {
		if got := lim.limits(id); got != want {
			t.Errorf("%s: limits %+v, want %+v", id, got, want)
		}
	}
	for _, bad := range []string{"acme", "acme:rate", "acme:rate=fast", "acme:rate=-1", "acme:rate=NaN",
		"acme:rate=+Inf", "acme:rows=10", "acme:rows=1.5", "acme:burst=3", "acme:rate=1,rate=2", "acme:rate=1;acme:rows=0",
		":rate=1", "ac\nme:rate=1"} {
		if err := new(LimitOverrides).Decode(bad); err == nil || !strings.Contains(err.Error(), "OWED_API_TENANT_LIMITS") {
			t.Errorf("%q: error %v, want one naming OWED_API_TENANT_LIMITS", bad, err)
		}
	}
	for _, bad := range []Limits{{Rate: -1}, {RowsPerMinute: 999}, {RowsPerMinute: -5}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
