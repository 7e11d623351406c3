// Package security_test checks, across services, that every endpoint needing
// a secret refuses without it, and that oversized and malformed requests get
// a 4xx and leave no partial state: the sweeper's /cron/* and /v1/*, the
// queue emulator, and the sandbox's send endpoint. The secrets-in-logs check
// runs on a real drill's logs in internal/drill.
package security_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/materialise"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/sweeper"
	scope "github.com/owedhq/owed/internal/tenant"
)

const (
	cronSecret   = "security-cron-secret-0123456789"
	serviceToken = "security-service-token-0123456789"
	tenant       = "acme"
	// overMiB is one byte past every endpoint's 1 MiB body limit.
	overMiB = 1<<20 + 1
)

type fixture struct {
	st      *stacktest.Stack
	sweeper http.Handler
	tenant  string // the tenant's API token
}

func setup(t *testing.T) fixture {
	t.Helper()
	st := stacktest.New(t, stacktest.Options{})
	cfg := sweeper.Config{CronSecret: cronSecret, APIToken: serviceToken, SweepBatch: 500, SweepBudget: 30 * time.Second,
		PublishAhead: time.Minute, RequeueAfter: 10 * time.Minute, SweepRequeueBatch: 500, SweepMaxOutstanding: 100000,
		SweepInterval: time.Minute, IdempotencyPrefix: "owed-", DBMaxConns: 4,
		Materialise: materialise.Config{Lookahead: 3 * time.Hour, DefaultLead: 10 * time.Minute},
		Queue: backends.Config{Backend: backends.REST,
			Rest: rest.Config{URL: st.QueueURL, Token: stacktest.QueueToken, Name: st.Queue.Name()}},
		DatabaseURL: st.DB.AppURL}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := sweeper.New(cfg, st.Ledger, st.Queue, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := api.NewTokens(st.DB.App, nil).Create(context.Background(), tenant, "security test")
	if err != nil {
		t.Fatal(err)
	}
	return fixture{st: st, sweeper: srv.Handler(), tenant: tok}
}

func serve(h http.Handler, method, path, auth string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// over returns a syntactically valid JSON object just over 1 MiB, so the
// limit, not the parser, must refuse it.
func over(prefix string) []byte {
	return []byte(prefix + `"pad":"` + strings.Repeat("x", overMiB) + `"}`)
}

// rows counts the ledger rows of every tenant, as the table's owner sees
// them through the bypass the operator aggregates use.
func rows(t *testing.T, f fixture) int {
	t.Helper()
	tx, err := f.st.DB.App.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var n int
	if err := scope.EnterAllTenants(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(`SELECT count(*) FROM owed_notifications`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func queueStats(t *testing.T, f fixture) queue.Stats {
	t.Helper()
	st, err := f.st.Queue.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestSecretsRequired(t *testing.T) {
	f := setup(t)
	for _, c := range []struct{ method, path string }{
		{"POST", "/cron/sweep"}, {"POST", "/cron/materialise"},
		{"POST", "/v1/notifications"}, {"GET", "/v1/notifications"}, {"GET", "/v1/notifications/1"},
		{"POST", "/v1/notifications/cancel"}, {"POST", "/v1/notifications/reschedule"}, {"POST", "/v1/events"},
	} {
		for _, auth := range []string{"", "Bearer ", "Bearer wrong", "Basic " + cronSecret} {
			if w := serve(f.sweeper, c.method, c.path, auth, []byte(`{}`)); w.Code != http.StatusUnauthorized {
				t.Errorf("%s %s with Authorization %q: HTTP %d, want 401", c.method, c.path, auth, w.Code)
			}
		}
	}
	// The cron secret opens /cron only, never the API.
	if w := serve(f.sweeper, "GET", "/v1/notifications", "Bearer "+cronSecret, nil); w.Code != http.StatusUnauthorized {
		t.Errorf("GET /v1/notifications with the cron secret: HTTP %d, want 401", w.Code)
	}
	for _, path := range []string{"/queue/publish", "/queue/publish_batch", "/queue/consume", "/queue/ack", "/queue/nack",
		"/queue/extend", "/queue/dead_letters", "/queue/dead_letters/redrive", "/queue/dead_letters/delete", "/queue/stats", "/admin/faults"} {
		for _, auth := range []string{"", "Bearer wrong"} {
			method := "POST"
			if path == "/queue/dead_letters" || path == "/queue/stats" {
				method = "GET"
			}
			if w := serve(f.st.Emulator, method, path, auth, []byte(`{}`)); w.Code != http.StatusUnauthorized {
				t.Errorf("queue %s %s with Authorization %q: HTTP %d, want 401", method, path, auth, w.Code)
			}
		}
	}
	// A sandbox with a signing secret refuses an unsigned send.
	sb, err := sandbox.New(sandbox.Config{Secret: "whsec_" + "c2VjdXJpdHktdGVzdC1zaWduaW5nLWtleQ=="})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/send", strings.NewReader(`{"type":"x","data":{"recipient":"a"}}`))
	r.Header.Set("webhook-id", "k1")
	w := httptest.NewRecorder()
	sb.ServeHTTP(w, r)
	if w.Code != http.StatusUnauthorized || sb.Stats().Accepted != 0 {
		t.Errorf("unsigned send to a signing sandbox: HTTP %d, %d accepted; want 401 and none", w.Code, sb.Stats().Accepted)
	}
}

func TestOversizedAndMalformedAPI(t *testing.T) {
	f := setup(t)
	auth := "Bearer " + f.tenant
	good := `{"recipient":"a@example.com","channel":"email","kind":"k","ref_id":"r1","due_at":"2030-01-01T00:00:00Z","payload":{"text":"hi"}}`
	bad := `{"recipient":"","channel":"email","kind":"k","ref_id":"r2","due_at":"2030-01-01T00:00:00Z","payload":{"text":"hi"}}`
	before := rows(t, f)
	for _, c := range []struct {
		name, path string
		body       []byte
	}{
		{"oversized", "/v1/notifications", over(`{"notifications":[` + good + `],`)},
		{"not JSON", "/v1/notifications", []byte(`{"notifications":[` + good)},
		{"wrong type", "/v1/notifications", []byte(`{"notifications":{"recipient":1}}`)},
		{"one bad row among good ones", "/v1/notifications", []byte(`{"notifications":[` + good + `,` + bad + `]}`)},
		{"trailing garbage", "/v1/notifications", []byte(`{"notifications":[` + good + `]} {}`)},
		{"oversized cancel", "/v1/notifications/cancel", over(`{"kind":"k","ref_id":"r1",`)},
		{"malformed cancel", "/v1/notifications/cancel", []byte(`{"kind":`)},
		{"oversized reschedule", "/v1/notifications/reschedule", over(`{"kind":"k","ref_id":"r1","delay_seconds":5,`)},
		{"malformed event", "/v1/events", []byte(`[`)},
		{"oversized event", "/v1/events", over(`{`)},
	} {
		w := serve(f.sweeper, "POST", c.path, auth, c.body)
		if w.Code/100 != 4 {
			t.Errorf("%s to %s: HTTP %d, want 4xx: %s", c.name, c.path, w.Code, w.Body.String())
		}
	}
	if after := rows(t, f); after != before {
		t.Errorf("refused requests changed the ledger: %d rows before, %d after", before, after)
	}
}

func TestOversizedAndMalformedCron(t *testing.T) {
	f := setup(t)
	f.st.Schedule(t, tenant, 3, time.Now().Add(-time.Minute), nil)
	before, stats := rows(t, f), queueStats(t, f)
	for _, c := range []struct {
		name string
		body []byte
	}{{"oversized", over(`{`)}, {"malformed", []byte(`{"oops`)}} {
		for _, path := range []string{"/cron/sweep", "/cron/materialise"} {
			w := serve(f.sweeper, "POST", path, "Bearer "+cronSecret, c.body)
			if w.Code/100 != 4 {
				t.Errorf("%s body to %s: HTTP %d, want 4xx (the hosted cron sends no body; one that does is not the cron): %s",
					c.name, path, w.Code, strings.TrimSpace(w.Body.String()))
			}
		}
	}
	if after := rows(t, f); after != before {
		t.Errorf("refused cron calls changed the ledger: %d rows before, %d after", before, after)
	}
	if after := queueStats(t, f); after.Visible+after.Delayed != stats.Visible+stats.Delayed {
		t.Errorf("refused cron calls published: queue %+v before, %+v after", stats, after)
	}
}

func TestOversizedAndMalformedQueue(t *testing.T) {
	f := setup(t)
	auth := "Bearer " + stacktest.QueueToken
	q := f.st.Queue.Name()
	entry := `{"payload":{"id":1},"idempotency_key":"k-1"}`
	before := queueStats(t, f)
	for _, c := range []struct {
		name, path string
		body       []byte
	}{
		{"oversized batch", "/queue/publish_batch", over(`{"queue":"` + q + `","messages":[` + entry + `],`)},
		{"malformed batch", "/queue/publish_batch", []byte(`{"queue":"` + q + `","messages":[` + entry)},
		{"batch of the wrong type", "/queue/publish_batch", []byte(`{"queue":"` + q + `","messages":{}}`)},
		{"oversized publish", "/queue/publish", over(`{"queue":"` + q + `","payload":{"id":1},`)},
		{"malformed publish", "/queue/publish", []byte(`{"queue":`)},
		{"malformed ack", "/queue/ack", []byte(`{"queue":"` + q + `","message_ids":"x"}`)},
		{"malformed faults", "/admin/faults", []byte(`{"redelivery_rate":"lots"}`)},
		{"oversized faults", "/admin/faults", over(`{`)},
	} {
		w := serve(f.st.Emulator, "POST", c.path, auth, c.body)
		if w.Code/100 != 4 {
			t.Errorf("%s to %s: HTTP %d, want 4xx: %s", c.name, c.path, w.Code, strings.TrimSpace(w.Body.String()))
		}
	}
	if after := queueStats(t, f); after != before {
		t.Errorf("refused requests changed the queue: %+v before, %+v after", before, after)
	}
}

func TestOversizedAndMalformedSandbox(t *testing.T) {
	sb, err := sandbox.New(sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		body []byte
		key  string
	}{
		{"oversized", over(`{"type":"x","data":{"recipient":"a"},`), "k1"},
		{"malformed", []byte(`{"type":`), "k2"},
		{"no idempotency key", []byte(`{"type":"x","data":{"recipient":"a"}}`), ""},
	} {
		r := httptest.NewRequest("POST", "/send", bytes.NewReader(c.body))
		if c.key != "" {
			r.Header.Set("webhook-id", c.key)
		}
		w := httptest.NewRecorder()
		sb.ServeHTTP(w, r)
		if w.Code/100 != 4 {
			t.Errorf("%s send: HTTP %d, want 4xx", c.name, w.Code)
		}
	}
	if st := sb.Stats(); st.Accepted != 0 || st.DistinctKeys != 0 || len(sb.Sends(sandbox.SendQuery{})) != 0 {
		t.Errorf("refused sends were recorded: %+v", st)
	}
}
