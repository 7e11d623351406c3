// Package security_test checks, across services, that every endpoint needing
// a secret refuses without it, and that oversized and malformed requests get
// a 4xx and leave no partial state: the sweeper's /cron/* and /v1/*, the
// queue emulator, and the sandbox's send endpoint. It also holds the cases
// of docs/security.md's threat model that cross services: what an anonymous
// scraper reaches, what a platform-injected DATABASE_URL (or TOKEN, SECRET)
// does, which database roles the services refuse to run as, and that no
// error repeats a password. The secrets-in-logs check runs on a real drill's
// logs in internal/drill.
package security_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/materialise"
	"github.com/owedhq/owed/internal/provider/providers"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/jetstream"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/sqs"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/sweeper"
	scope "github.com/owedhq/owed/internal/tenant"
	"github.com/owedhq/owed/internal/testdb"
	"github.com/owedhq/owed/internal/testenv"
	"github.com/owedhq/owed/internal/worker"
)

const (
	cronSecret   = "security-cron-secret-0123456789"
	serviceToken = "security-service-token-0123456789"
	faultToken   = "security-fault-token-0123456789"
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
	st := stacktest.New(t, stacktest.Options{Emulator: func(c *emulator.Config) { c.FaultToken = faultToken }})
	cfg := sweeperConfig(st)
	cfg.APIToken = serviceToken
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := sweeper.New(cfg, st.Ledger, st.Queue, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := api.NewTokens(st.DB.Admin, nil).Create(context.Background(), tenant, "security test")
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

// rows counts the ledger rows of every tenant, as the table's owner (which
// the policies exempt) sees them.
func rows(t *testing.T, f fixture) int {
	t.Helper()
	var n int
	if err := f.st.DB.Owner.QueryRow(`SELECT count(*) FROM owed_notifications`).Scan(&n); err != nil {
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
		// /admin/faults takes the fault token, set below.
		{"oversized batch", "/queue/publish_batch", over(`{"queue":"` + q + `","messages":[` + entry + `],`)},
		{"malformed batch", "/queue/publish_batch", []byte(`{"queue":"` + q + `","messages":[` + entry)},
		{"batch of the wrong type", "/queue/publish_batch", []byte(`{"queue":"` + q + `","messages":{}}`)},
		{"oversized publish", "/queue/publish", over(`{"queue":"` + q + `","payload":{"id":1},`)},
		{"malformed publish", "/queue/publish", []byte(`{"queue":`)},
		{"malformed ack", "/queue/ack", []byte(`{"queue":"` + q + `","message_ids":"x"}`)},
		{"malformed faults", "/admin/faults", []byte(`{"redelivery_rate":"lots"}`)},
		{"oversized faults", "/admin/faults", over(`{`)},
	} {
		a := auth
		if c.path == "/admin/faults" {
			a = "Bearer " + faultToken
		}
		w := serve(f.st.Emulator, "POST", c.path, a, c.body)
		if w.Code/100 != 4 || w.Code == http.StatusUnauthorized {
			t.Errorf("%s to %s: HTTP %d, want a 4xx other than 401: %s", c.name, c.path, w.Code, strings.TrimSpace(w.Body.String()))
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

// TestOperatorEndpointsAreNotPublic: an anonymous client of the sweeper's
// public listener (the API's) reaches neither /metrics nor /readyz; they are
// on the operator listener, loopback unless the deployment opens it, and
// /healthz answers on both.
func TestOperatorEndpointsAreNotPublic(t *testing.T) {
	f := setup(t)
	for _, path := range []string{"/metrics", "/readyz"} {
		if w := serve(f.sweeper, "GET", path, "", nil); w.Code != http.StatusNotFound {
			t.Errorf("GET %s on the public listener: HTTP %d, want 404", path, w.Code)
		}
	}
	ops, err := service.LoadOperations(sweeper.MetricsAddrDefault)
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := net.SplitHostPort(ops.MetricsAddr); !net.ParseIP(host).IsLoopback() {
		t.Errorf("the sweeper's default OWED_METRICS_ADDR is %s, want a loopback address", ops.MetricsAddr)
	}
	t.Setenv("OWED_METRICS_ADDR", "")
	if _, err := service.LoadOperations(sweeper.MetricsAddrDefault); err == nil || !strings.Contains(err.Error(), "OWED_METRICS_ADDR") {
		t.Errorf("an empty OWED_METRICS_ADDR for the sweeper: %v, want it refused", err)
	}

	// The wiring cmd/sweeper uses: two real listeners.
	srv, err := sweeper.New(sweeperConfig(f.st), f.st.Ledger, f.st.Queue, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := service.Start("sweeper", service.Basics{LogLevel: "error", DatabaseURL: f.st.DB.AppURL, DBMaxConns: 1,
		ListenAddr: "127.0.0.1:0", Operations: service.Operations{MetricsAddr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan error, 1)
	go func() { done <- p.Serve(srv.Handler(), srv.OpsHandler()) }()
	public, operator := "http://"+p.Listener.Addr().String(), "http://"+p.Metrics.Addr().String()
	for _, c := range []struct {
		base, path string
		want       int
	}{
		{public, "/metrics", 404}, {public, "/readyz", 404}, {public, "/healthz", 200},
		{operator, "/metrics", 200}, {operator, "/readyz", 200}, {operator, "/healthz", 200}, {operator, "/v1/notifications", 404},
	} {
		resp, err := http.Get(c.base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET %s%s: HTTP %d, want %d", c.base, c.path, resp.StatusCode, c.want)
		}
	}
	p.Shutdown()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func sweeperConfig(st *stacktest.Stack) sweeper.Config {
	return sweeper.Config{CronSecret: cronSecret, SweepBatch: 500, SweepBudget: 30 * time.Second,
		PublishAhead: time.Minute, RequeueAfter: 10 * time.Minute, SweepRequeueBatch: 500, SweepMaxOutstanding: 100000,
		QueueDepth: 2 * time.Second, IdempotencyPrefix: "owed-", DBMaxConns: 4,
		Materialise: materialise.Config{Lookahead: 3 * time.Hour, DefaultLead: 10 * time.Minute},
		Queue: backends.Config{Backend: backends.REST,
			Rest: rest.Config{URL: st.QueueURL, Token: stacktest.QueueToken, Name: st.Queue.Name()}},
		DatabaseURL: st.DB.AppURL}
}

// TestFaultEndpointNeedsItsOwnToken: a queue client's token does not open
// the emulator's /admin/faults, which would let it throttle or redeliver
// for every client.
func TestFaultEndpointNeedsItsOwnToken(t *testing.T) {
	f := setup(t)
	if w := serve(f.st.Emulator, "POST", "/admin/faults", "Bearer "+stacktest.QueueToken, []byte(`{"throttle_rate":1}`)); w.Code != http.StatusUnauthorized {
		t.Errorf("POST /admin/faults with the queue token: HTTP %d, want 401", w.Code)
	}
	if got := f.st.Emulator.Faults(); got.ThrottleRate != 0 {
		t.Errorf("the queue token set faults: %+v", got)
	}
	if w := serve(f.st.Emulator, "POST", "/admin/faults", "Bearer "+faultToken, []byte(`{}`)); w.Code != http.StatusOK {
		t.Errorf("POST /admin/faults with the fault token: HTTP %d, want 200: %s", w.Code, w.Body)
	}
}

// TestMaterialiseAnswerHasNoRecipients: the hosted cron's view of
// /cron/materialise (and so its logs) names skipped items, not whom they
// were for.
func TestMaterialiseAnswerHasNoRecipients(t *testing.T) {
	f := setup(t)
	const recipient = "private.person@example.com"
	err := scope.InTx(context.Background(), f.st.DB.App, tenant, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_items (tenant_id, recipient, channel, kind, ref_id, starts_at)
			VALUES ($1, $2, 'fax', 'meeting_soon', 'm-1', now() + interval '1 hour')`, tenant, recipient)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	w := serve(f.sweeper, "POST", "/cron/materialise", "Bearer "+cronSecret, nil)
	var res materialise.Result
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || len(res.Skipped) != 1 {
		t.Fatalf("materialise: HTTP %d %s (%v), want the fax item skipped", w.Code, w.Body, err)
	}
	if strings.Contains(w.Body.String(), recipient) {
		t.Errorf("/cron/materialise answers with a recipient: %s", w.Body)
	}
}

// TestOnlyOWEDVariablesAreRead: a platform that injects DATABASE_URL (often
// an owner or a superuser), TOKEN, SECRET or API_KEY changes nothing; only
// OWED_* names configure owed.
func TestOnlyOWEDVariablesAreRead(t *testing.T) {
	clearOWEDEnv(t)
	for k, v := range map[string]string{
		"DATABASE_URL": "postgres://postgres:platform@db/owed", "TOKEN": "platform-token", "SECRET": "whsec_platform",
		"API_KEY": "SG.platform", "SERVER_TOKEN": "platform", "AUTH_TOKEN": "platform", "ACCOUNT_SID": "AC1",
		"QUEUE_TOKEN": "platform", "QUEUE_DATABASE_URL": "postgres://postgres@db/owed", "CRON_SECRET": "platform-cron-secret-0123",
		"URL": "http://platform.example.com", "METRICS_ADDR": ":9999",
	} {
		t.Setenv(k, v)
	}
	t.Setenv("OWED_CRON_SECRET", cronSecret)
	t.Setenv("OWED_QUEUE_URL", "http://127.0.0.1:8181")
	t.Setenv("OWED_QUEUE_TOKEN", "owed-queue-token")
	if _, err := sweeper.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_DATABASE_URL is not set") {
		t.Errorf("sweeper.LoadConfig with DATABASE_URL but no OWED_DATABASE_URL: %v, want OWED_DATABASE_URL not set", err)
	}
	t.Setenv("OWED_DATABASE_URL", "postgres://owed_app@db/owed")
	sc, err := sweeper.LoadConfig()
	if err != nil || sc.DatabaseURL != "postgres://owed_app@db/owed" || sc.CronSecret != cronSecret || sc.Queue.Rest.Token != "owed-queue-token" {
		t.Errorf("sweeper.LoadConfig = %+v, %v; want only the OWED_ values", sc, err)
	}
	wc, err := worker.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if p := wc.Providers; p.Webhook.Secret != "" || p.Webhook.URL != "" || p.Telegram.Token != "" || p.Slack.Token != "" ||
		p.SendGrid.APIKey != "" || p.Postmark.ServerToken != "" || p.Twilio.AuthToken != "" || p.Twilio.AccountSID != "" {
		t.Errorf("worker.LoadConfig took a bare name into a provider's credentials: %+v", p)
	}
	var ec emulator.Config
	if err := config.Process("OWED", &ec); err != nil || ec.Token != "owed-queue-token" || ec.DatabaseURL != "" {
		t.Errorf("the emulator's configuration = %+v, %v; want no bare QUEUE_TOKEN or QUEUE_DATABASE_URL", ec, err)
	}
	if ops, err := service.LoadOperations(sweeper.MetricsAddrDefault); err != nil || ops.MetricsAddr != sweeper.MetricsAddrDefault {
		t.Errorf("LoadOperations = %+v, %v; want the default, not the bare METRICS_ADDR", ops, err)
	}

	// A '.' in the key prefix blurs the signed "id.timestamp.body".
	t.Setenv("OWED_IDEMPOTENCY_PREFIX", "owed.")
	if _, err := sweeper.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_IDEMPOTENCY_PREFIX") {
		t.Errorf("OWED_IDEMPOTENCY_PREFIX=owed.: %v, want it refused", err)
	}
}

// clearOWEDEnv unsets, for this test, every OWED_ variable the services read.
func clearOWEDEnv(t *testing.T) {
	t.Helper()
	for _, spec := range []any{&sweeper.Config{}, &materialise.Config{}, &backends.Config{}, &rest.Config{}, &sqs.Config{},
		&jetstream.Config{}, &worker.Config{}, &providers.Config{}, &emulator.Config{}, &service.Operations{}} {
		vars, err := config.Variables("OWED", spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vars {
			t.Setenv(v.Key, "")
			os.Unsetenv(v.Key)
		}
	}
}

// malformedURL is a database URL no parser accepts, with a password.
const malformedURL = "postgres://owed:S3cr3t%zz@db/owed"

// TestURLErrorsNeverCarryThePassword: lib/pq and the NATS client quote a
// URL they cannot parse, password and all; owed's errors name the variable
// and leave the password out.
func TestURLErrorsNeverCarryThePassword(t *testing.T) {
	check := func(what, variable string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), variable) || strings.Contains(err.Error(), "S3cr3t") {
			t.Errorf("%s: %v, want an error naming %s without the password", what, err, variable)
		}
	}
	_, err := service.Start("test", service.Basics{LogLevel: "error", DatabaseURL: malformedURL, DBMaxConns: 1, ListenAddr: "127.0.0.1:0"})
	check("service.Start", "OWED_DATABASE_URL", err)
	ecfg := emulator.DefaultConfig()
	ecfg.Token, ecfg.DatabaseURL = "t", malformedURL
	_, err = emulator.Open(context.Background(), ecfg, zerolog.Nop())
	check("emulator.Open", "OWED_QUEUE_DATABASE_URL", err)

	for _, c := range []struct {
		variable string
		cfg      backends.Config
	}{
		{"OWED_QUEUE_URL", backends.Config{Backend: backends.REST,
			Rest: rest.Config{URL: "https://owed:S3cr3t%zz@queue.example.com", Token: "t", Name: "q"}}},
		{"OWED_SQS_QUEUE_URL", backends.Config{Backend: backends.SQS,
			SQS: sqs.Config{QueueURL: "https://owed:S3cr3t%zz@sqs.example.com/1/q", DeadLetterQueueURL: "https://sqs.example.com/1/dlq"}}},
		{"OWED_NATS_URL", backends.Config{Backend: backends.JetStream,
			JetStream: jetstream.Config{URL: "nats://owed:S3cr3t%zz@127.0.0.1:1"}}},
	} {
		_, err := backends.Open(context.Background(), c.cfg, zerolog.Nop())
		check("backends.Open "+c.cfg.Backend, c.variable, err)
	}
}

// superuserURL is the cluster superuser on db; the test is skipped (failed
// under make test) when the harness gave none (scripts/with-postgres.sh
// exports OWED_TEST_SUPERUSER_URL for the cluster it starts).
func superuserURL(t *testing.T, db *testdb.DB) string {
	t.Helper()
	su := os.Getenv("OWED_TEST_SUPERUSER_URL")
	if su == "" {
		testenv.Missing(t, "OWED_TEST_SUPERUSER_URL (the cluster's superuser)",
			"scripts/with-postgres.sh sets it for the cluster it starts; with your own OWED_TEST_DATABASE_URL, set it too")
	}
	return roleURL(t, su, db.Name, "")
}

// roleURL is base on database name, as user when user is not empty.
func roleURL(t *testing.T, base, name, user string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	if user != "" {
		u.User = url.User(user)
	}
	return u.String()
}

// newRole creates a login role for this test only, "CREATE ROLE <name>
// LOGIN <attrs>" then each of after (with %[1]s for the name), and returns
// the URL connecting to db as it. The harness trusts local connections, so
// no password is needed.
func newRole(t *testing.T, db *testdb.DB, attrs string, after ...string) string {
	t.Helper()
	su, err := sql.Open("postgres", superuserURL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { su.Close() })
	var suffix string
	if err := su.QueryRow(`SELECT substr(md5(random()::text), 1, 10)`).Scan(&suffix); err != nil {
		t.Fatal(err)
	}
	name := "owed_sec_" + suffix
	for _, stmt := range append([]string{"CREATE ROLE %[1]s LOGIN " + attrs}, after...) {
		if _, err := su.Exec(fmt.Sprintf(stmt, name)); err != nil {
			t.Fatalf("%s: %v", fmt.Sprintf(stmt, name), err)
		}
	}
	t.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY %[1]s", "DROP ROLE %[1]s"} {
			if _, err := su.Exec(fmt.Sprintf(stmt, name)); err != nil {
				t.Errorf("%s: %v", fmt.Sprintf(stmt, name), err)
			}
		}
	})
	return roleURL(t, db.AppURL, db.Name, name)
}

// start is service.Start, the start-up of every service, on dbURL.
func start(dbURL string, allowInsecure bool) error {
	p, err := service.Start("test", service.Basics{LogLevel: "error", DatabaseURL: dbURL, DBMaxConns: 1,
		ListenAddr: "127.0.0.1:0", Operations: service.Operations{AllowInsecureRole: allowInsecure}})
	if err == nil {
		p.Close()
	}
	return err
}

// withOption adds a libpq options parameter (-c name=value) to u.
func withOption(u, option string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + "options=" + url.QueryEscape(option)
}

// TestServicesRefuseAnInsecureRole: a misconfigured role (a superuser, a
// BYPASSRLS role, the tables' owner, a member of one) or a bypass set for
// every session stops every service at start-up with a message naming the
// problem, instead of running with tenant isolation silently off.
func TestServicesRefuseAnInsecureRole(t *testing.T) {
	db := testdb.New(t)
	var owner string
	if err := db.Owner.QueryRow(`SELECT tableowner FROM pg_tables WHERE tablename = 'owed_notifications'`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	app := testdb.AppUser()
	for _, c := range []struct{ name, url, want string }{
		{"the superuser", superuserURL(t, db), "superuser"},
		{"the tables' owner", db.OwnerURL, "owns"},
		{"a BYPASSRLS role", newRole(t, db, "BYPASSRLS IN ROLE "+app), "BYPASSRLS"},
		{"a member of the owner", newRole(t, db, "IN ROLE "+owner), "owed_notifications"},
		{"a member of a superuser role", newRole(t, db, "IN ROLE "+app, "CREATE ROLE %[1]s_su SUPERUSER NOLOGIN",
			"GRANT %[1]s_su TO %[1]s"), "superuser or BYPASSRLS role"},
		{"bypass in the URL's options", withOption(db.AppURL, "-c owed.bypass_rls=on"), "owed.bypass_rls"},
		{"bypass set by ALTER ROLE", newRole(t, db, "IN ROLE "+app, "ALTER ROLE %[1]s SET owed.bypass_rls = 'on'"), "owed.bypass_rls"},
		{"a session-wide tenant", newRole(t, db, "IN ROLE "+app, "ALTER ROLE %[1]s SET owed.tenant_id = 'acme'"), "owed.tenant_id"},
	} {
		if err := start(c.url, false); err == nil || !strings.Contains(err.Error(), "refusing") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Start = %v, want a refusal naming %q", c.name, err, c.want)
		}
	}
	// The development escape hatch starts anyway (and logs every problem).
	if err := start(db.OwnerURL, true); err != nil {
		t.Errorf("the owner with %s: %v", service.InsecureRoleVariable, err)
	}
}

// TestPGOPTIONSBypassIsRefused: PGOPTIONS reaches every connection libpq
// makes, so a bypass there would hold for the whole pool.
func TestPGOPTIONSBypassIsRefused(t *testing.T) {
	db := testdb.New(t)
	t.Setenv("PGOPTIONS", "-c owed.bypass_rls=on")
	if err := start(db.AppURL, false); err == nil || !strings.Contains(err.Error(), "owed.bypass_rls") {
		t.Errorf("Start under PGOPTIONS=-c owed.bypass_rls=on: %v, want a refusal naming owed.bypass_rls", err)
	}
}

// TestAnotherApplicationRoleNameWorks: the check asks what a role can do,
// not what it is called. A role of another name granted owed_runtime starts
// and is ready; one whose membership is revoked after it started is told at
// /readyz that a permission is missing, and which role to grant, rather
// than "cannot read the migration version".
func TestAnotherApplicationRoleNameWorks(t *testing.T) {
	f := setup(t)
	granted := newRole(t, f.st.DB, "IN ROLE owed_runtime")
	revoked := newRole(t, f.st.DB, "IN ROLE owed_runtime")
	for _, c := range []struct {
		name, url string
		revoke    bool
		status    int
		want      string
	}{
		{"a role granted owed_runtime", granted, false, http.StatusOK, `"database":"ok"`},
		{"a role whose owed_runtime was revoked", revoked, true, http.StatusServiceUnavailable,
			"permission denied to read the migration version"},
	} {
		if err := start(c.url, false); err != nil {
			t.Errorf("%s: Start: %v", c.name, err)
			continue
		}
		if c.revoke {
			u, _ := url.Parse(c.url)
			su, err := sql.Open("postgres", superuserURL(t, f.st.DB))
			if err != nil {
				t.Fatal(err)
			}
			defer su.Close()
			if _, err := su.Exec("REVOKE owed_runtime FROM " + u.User.Username()); err != nil {
				t.Fatal(err)
			}
		}
		pool, err := sql.Open("postgres", c.url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		srv, err := sweeper.New(sweeperConfig(f.st), ledger.New(pool, nil), f.st.Queue, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		w := serve(srv.OpsHandler(), "GET", "/readyz", "", nil)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s: /readyz HTTP %d %s, want %d with %q", c.name, w.Code, strings.TrimSpace(w.Body.String()), c.status, c.want)
		}
	}
}
