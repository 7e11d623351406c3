package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/console"
	"github.com/owedhq/owed/internal/devstack/devstacktest"
	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/testdb"
)

const token = "console-test-token-0123456789"

type bundle struct {
	stack   *stacktest.Stack
	console *console.Console
	srv     *httptest.Server
	log     *devstacktest.Buffer
	reg     *prometheus.Registry
}

// setup serves a console over a fresh stack with o's token and header; opts
// change the console's other options.
func setup(t *testing.T, tok, header string, opts ...func(*console.Options)) *bundle {
	t.Helper()
	s := stacktest.New(t, stacktest.Options{})
	log := &devstacktest.Buffer{}
	reg := prometheus.NewRegistry()
	o := console.Options{Ledger: s.Operator, Queue: s.Queue, Token: tok, TrustedHeader: header,
		Log: zerolog.New(log), Metrics: reg}
	for _, f := range opts {
		f(&o)
	}
	c := console.New(o)
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, c)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &bundle{stack: s, console: c, srv: srv, log: log, reg: reg}
}

// client follows no redirects, so a test sees each answer.
func (b *bundle) client(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func do(t *testing.T, c *http.Client, method, u string, form url.Values, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// login logs in as name and returns the client holding the session.
func (b *bundle) login(t *testing.T, name string) *http.Client {
	t.Helper()
	c := b.client(t)
	resp, body := do(t, c, "POST", b.srv.URL+"/console/login",
		url.Values{"operator": {name}, "token": {token}, "next": {"/console/"}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login answered %d: %s", resp.StatusCode, body)
	}
	return c
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF field on the page: %s", page)
	}
	return m[1]
}

func TestOffWithoutTokenOrHeaderAnswers404AndSaysHowToEnable(t *testing.T) {
	t.Parallel()
	b := setup(t, "", "")
	for _, path := range []string{"/console/", "/console/login", "/console/dead-letters"} {
		if resp, _ := do(t, b.client(t), "GET", b.srv.URL+path, nil, map[string]string{"X-Forwarded-User": "alice"}); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s with the console off answered %d, want 404", path, resp.StatusCode)
		}
	}
	if !strings.Contains(b.log.String(), "set OWED_CONSOLE_TOKEN") {
		t.Errorf("the log does not say how to enable the console: %s", b.log.String())
	}
}

func TestTokenLoginSetsAStrictHttpOnlyCookie(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	c := b.client(t)
	resp, _ := do(t, c, "GET", b.srv.URL+"/console/dead-letters", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/console/login?next=") {
		t.Errorf("an anonymous GET answered %d to %q, want 303 to the login form", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := do(t, c, "GET", b.srv.URL+"/console/", nil, map[string]string{"Authorization": "Bearer wrong-token-0123456789"}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong bearer token answered %d, want 401", resp.StatusCode)
	}
	if resp, body := do(t, c, "POST", b.srv.URL+"/console/login", url.Values{"operator": {"mallory"}, "token": {"wrong-token-0123456789"}}, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "wrong token") {
		t.Errorf("a login with the wrong token answered %d, want 401 saying so", resp.StatusCode)
	}
	if strings.Contains(b.log.String(), "wrong-token") {
		t.Error("the log shows the offered token")
	}
	resp, _ = do(t, c, "POST", b.srv.URL+"/console/login", url.Values{"operator": {"alice"}, "token": {token}, "next": {"https://evil.example/"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Errorf("login answered %d to %q, want 303 to /console/ (never off the console)", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == console.CookieName {
			cookie = ck
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != console.Prefix {
		t.Fatalf("session cookie %+v, want HttpOnly, SameSite=Strict, Path=/console/", cookie)
	}
	if strings.Contains(cookie.Value, token) {
		t.Error("the session cookie carries the token")
	}
	resp, body := do(t, c, "GET", b.srv.URL+"/console/", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Owed backlog") || !strings.Contains(body, "alice") {
		t.Errorf("the dashboard after login answered %d: %.300s", resp.StatusCode, body)
	}
	if resp, _ := do(t, b.client(t), "GET", b.srv.URL+"/console/", nil, map[string]string{"Authorization": "Bearer " + token}); resp.StatusCode != http.StatusOK {
		t.Errorf("the right bearer token answered %d, want 200", resp.StatusCode)
	}
	// A tampered session is refused.
	forged := &http.Cookie{Name: console.CookieName, Value: strings.Replace(cookie.Value, cookie.Value[:4], "Ym9i", 1)}
	req, _ := http.NewRequest("GET", b.srv.URL+"/console/", nil)
	req.AddCookie(forged)
	if resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a tampered session answered %v %v, want a redirect to the login", resp.StatusCode, err)
	}
}

func TestTrustedHeaderHonouredOnlyWhenConfigured(t *testing.T) {
	t.Parallel()
	withToken := setup(t, token, "")
	hdr := map[string]string{"X-Forwarded-User": "alice@example.com"}
	if resp, _ := do(t, withToken.client(t), "GET", withToken.srv.URL+"/console/", nil, hdr); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("X-Forwarded-User without OWED_CONSOLE_TRUSTED_HEADER answered %d, want the login redirect", resp.StatusCode)
	}
	proxied := setup(t, "", "X-Forwarded-User")
	resp, body := do(t, proxied.client(t), "GET", proxied.srv.URL+"/console/", nil, hdr)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "alice@example.com") {
		t.Errorf("the trusted header answered %d: %.300s", resp.StatusCode, body)
	}
	if resp, _ := do(t, proxied.client(t), "GET", proxied.srv.URL+"/console/", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no header behind the proxy answered %d, want 401", resp.StatusCode)
	}
}

// setupDeadLetter schedules a row, fails it and dead-letters its message, as
// the worker does for a permanent failure; it returns the row and the dead
// letter's id.
func setupDeadLetter(t *testing.T, s *stacktest.Stack, tenant string) (ledger.Scheduled, string) {
	t.Helper()
	return setupDeadLetterOf(t, s, tenant, nil)
}

// setupDeadLetterOf is setupDeadLetter whose row's failure records
// attempt (none when nil).
func setupDeadLetterOf(t *testing.T, s *stacktest.Stack, tenant string, attempt *ledger.Attempt) (ledger.Scheduled, string) {
	t.Helper()
	ctx := context.Background()
	due := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	row := s.Schedule(t, tenant, 1, due, nil)[0]
	c, err := s.Ledger.ClaimForSend(ctx, tenant, row.ID, ledger.ClaimParams{DueAt: due, LeaseFor: time.Minute})
	if err != nil || c.Outcome != ledger.ClaimSend {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	if err := s.Ledger.SettleFailed(ctx, c.Hold, "provider answered 422", attempt, false); err != nil {
		t.Fatal(err)
	}
	body, err := envelope.Encode(envelope.Envelope{Tenant: tenant, ID: row.ID, DueAt: due, Key: ledger.IdempotencyKey("owed-", row.ID, due)})
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("row-%d", row.ID)
	if _, err := s.Queue.Publish(ctx, []queue.Message{{Key: key, Body: body}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		ds, err := s.Queue.Receive(ctx, 10, time.Second, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Key == key {
				if err := s.Queue.DeadLetter(ctx, d, "permanent: provider answered 422"); err != nil {
					t.Fatal(err)
				}
				list, _, err := s.Queue.DeadLetters(ctx, 100, "")
				if err != nil {
					t.Fatal(err)
				}
				for _, dl := range list {
					if dl.Key == key {
						return row, ops.DeadLetterIDPrefix + dl.ID
					}
				}
			}
		}
	}
	t.Fatal("the row's message was not dead-lettered within 30s")
	return row, ""
}

func TestPostsNeedTheCSRFFieldAndTheSameOrigin(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	_, dl := setupDeadLetter(t, b.stack, "acme")
	c := b.login(t, "alice")
	_, page := do(t, c, "GET", b.srv.URL+"/console/dead-letters", nil, nil)
	csrf := csrfOf(t, page)
	action := b.srv.URL + "/console/dead-letters/action"
	form := url.Values{"do": {"delete-selected"}, "id": {dl}, "confirm": {"yes"}}
	if resp, _ := do(t, c, "POST", action, form, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a POST without the CSRF field answered %d, want 403", resp.StatusCode)
	}
	form.Set("csrf", csrf)
	if resp, _ := do(t, c, "POST", action, form, map[string]string{"Origin": "https://evil.example"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a POST from another origin answered %d, want 403", resp.StatusCode)
	}
	form.Set("csrf", strings.Repeat("0", len(csrf)))
	if resp, _ := do(t, c, "POST", action, form, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a POST with a wrong CSRF field answered %d, want 403", resp.StatusCode)
	}
	if st, err := b.stack.Queue.Stats(context.Background()); err != nil || st.DeadLetterDepth != 1 {
		t.Fatalf("after refused POSTs the queue has %+v (%v), want its one dead letter", st, err)
	}
	// The right field from this origin is asked to confirm first.
	form.Set("csrf", csrf)
	form.Del("confirm")
	resp, body := do(t, c, "POST", action, form, map[string]string{"Origin": b.srv.URL})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Yes, delete 1") {
		t.Errorf("an unconfirmed delete answered %d: %.400s", resp.StatusCode, body)
	}
	if st, _ := b.stack.Queue.Stats(context.Background()); st.DeadLetterDepth != 1 {
		t.Error("an unconfirmed delete deleted")
	}
}

// A redrive from the console reopens the failed row (ops.RedriveDeadLetters,
// as owedctl dlq redrive), removes its dead letter and writes the audit line
// to the log and the table.
func TestRedriveAllMatchingIsConfirmedAndAudited(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	row, _ := setupDeadLetter(t, b.stack, "acme")
	other, otherDL := setupDeadLetter(t, b.stack, "globex")
	c := b.login(t, "alice")
	_, page := do(t, c, "GET", b.srv.URL+"/console/dead-letters?tenant=acme", nil, nil)
	if !strings.Contains(page, "1 dead letters match") || strings.Contains(page, `value="`+otherDL+`"`) {
		t.Fatalf("the tenant filter did not keep acme's one dead letter: %s", page)
	}
	form := url.Values{"csrf": {csrfOf(t, page)}, "do": {"redrive-matching"}, "tenant": {"acme"}}
	_, confirm := do(t, c, "POST", b.srv.URL+"/console/dead-letters/action", form, nil)
	if !strings.Contains(confirm, "Yes, redrive 1") {
		t.Fatalf("no confirmation for one dead letter: %s", confirm)
	}
	form.Set("confirm", "yes")
	form.Set("why", "provider fixed")
	resp, done := do(t, c, "POST", b.srv.URL+"/console/dead-letters/action", form, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(done, "Redrove 1 dead letters") {
		t.Fatalf("the confirmed redrive answered %d: %s", resp.StatusCode, done)
	}
	ctx := context.Background()
	if got, err := b.stack.Ledger.Get(ctx, "acme", row.ID); err != nil || got.State != ledger.StatePending {
		t.Errorf("acme's row after the redrive: %s (%v), want pending", got.State, err)
	}
	if got, err := b.stack.Ledger.Get(ctx, "globex", other.ID); err != nil || got.State != ledger.StateFailed {
		t.Errorf("globex's row, outside the filter: %s (%v), want still failed", got.State, err)
	}
	if st, _ := b.stack.Queue.Stats(ctx); st.DeadLetterDepth != 1 {
		t.Errorf("dead letters after the redrive: %d, want globex's one", st.DeadLetterDepth)
	}
	actions, err := b.stack.Ledger.OperatorActions(ctx, 10)
	if err != nil || len(actions) != 1 {
		t.Fatalf("audit rows %+v (%v), want one", actions, err)
	}
	if a := actions[0]; a.Operator != "alice" || a.Action != "dlq_redrive" || a.Target != "filter: tenant=acme" || a.Count != 1 || a.Reason != "provider fixed" {
		t.Errorf("audit row %+v", a)
	}
	if log := b.log.String(); !strings.Contains(log, `"action":"dlq_redrive"`) || !strings.Contains(log, `"operator":"alice"`) || !strings.Contains(log, `"count":1`) {
		t.Errorf("no audit log line: %s", log)
	}
	_, audit := do(t, c, "GET", b.srv.URL+"/console/audit", nil, nil)
	if !strings.Contains(audit, "dlq_redrive") || !strings.Contains(audit, "filter: tenant=acme") {
		t.Errorf("the audit page lacks the redrive: %s", audit)
	}
}

// TestDeadLetterRedriveOfAPermanentFailureNeedsForce: a dead letter whose
// row's last attempt failed permanently is kept by a
// redrive, and the page says how to force it; forced without a reason it
// is refused, and with one it is reopened.
func TestDeadLetterRedriveOfAPermanentFailureNeedsForce(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	now := time.Now()
	row, dl := setupDeadLetterOf(t, b.stack, "acme", &ledger.Attempt{Provider: "sandbox", StartedAt: now, FinishedAt: now,
		Outcome: ledger.AttemptPermanent, HTTPStatus: 422, Error: "422 recipient bounced"})
	if !strings.HasPrefix(dl, "dl_") {
		t.Errorf("dead letter id %q, want it to begin dl_", dl)
	}
	c := b.login(t, "alice")
	_, page := do(t, c, "GET", b.srv.URL+"/console/dead-letters", nil, nil)
	if !strings.Contains(page, dl) {
		t.Errorf("the dead-letter page does not show %s: %s", dl, page)
	}
	form := url.Values{"csrf": {csrfOf(t, page)}, "do": {"redrive-selected"}, "id": {dl}, "confirm": {"yes"}}
	_, done := do(t, c, "POST", b.srv.URL+"/console/dead-letters/action", form, nil)
	if !strings.Contains(done, "Redrove 0") || !strings.Contains(done, "failed permanently (422 recipient bounced)") ||
		!strings.Contains(done, `id="kept-permanent"`) {
		t.Fatalf("an unforced redrive of a permanent failure: %s", done)
	}
	form.Set("force", "yes")
	if resp, _ := do(t, c, "POST", b.srv.URL+"/console/dead-letters/action", form, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a forced redrive without a reason answered %d, want 400", resp.StatusCode)
	}
	form.Set("why", "address corrected")
	if _, done := do(t, c, "POST", b.srv.URL+"/console/dead-letters/action", form, nil); !strings.Contains(done, "Redrove 1") {
		t.Fatalf("a forced redrive: %s", done)
	}
	if got, _ := b.stack.Ledger.Get(context.Background(), "acme", row.ID); got.State != ledger.StatePending {
		t.Errorf("the row after the forced redrive is %s, want pending", got.State)
	}
}

func TestPayloadIsHiddenUntilReadWithAReasonAndTheReadIsAudited(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	row := b.stack.Schedule(t, "acme", 1, time.Now().Add(time.Hour), func(_ int, r *ledger.NewNotification) {
		r.Payload = []byte(`{"text":"secret-appointment-text"}`)
	})[0]
	c := b.login(t, "alice")
	u := fmt.Sprintf("%s/console/notifications/%d", b.srv.URL, row.ID)
	_, page := do(t, c, "GET", u, nil, nil)
	if strings.Contains(page, "secret-appointment-text") || !strings.Contains(page, "scheduled") {
		t.Fatalf("the notification page shows the payload or lacks the timeline: %s", page)
	}
	form := url.Values{"csrf": {csrfOf(t, page)}}
	if resp, body := do(t, c, "POST", u+"/payload", form, nil); resp.StatusCode != http.StatusBadRequest || strings.Contains(body, "secret-appointment-text") {
		t.Errorf("a payload read without a reason answered %d", resp.StatusCode)
	}
	form.Set("reason", "ticket 77")
	resp, body := do(t, c, "POST", u+"/payload", form, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "secret-appointment-text") {
		t.Fatalf("the payload read answered %d: %s", resp.StatusCode, body)
	}
	actions, err := b.stack.Ledger.OperatorActions(context.Background(), 10)
	if err != nil || len(actions) != 1 || actions[0].Action != "payload_read" || actions[0].Reason != "ticket 77" ||
		actions[0].Target != fmt.Sprintf("tenant=acme id=%d", row.ID) {
		t.Errorf("audit rows %+v (%v), want the payload read", actions, err)
	}
	_, found := do(t, c, "GET", b.srv.URL+"/console/notifications?tenant=acme&recipient=r0", nil, nil)
	if !strings.Contains(found, fmt.Sprintf(`/console/notifications/%d"`, row.ID)) {
		t.Errorf("find by tenant and recipient lacks the row: %s", found)
	}
	if resp, _ := do(t, c, "GET", fmt.Sprintf("%s/console/notifications?id=%d", b.srv.URL, row.ID), nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("find by id answered %d, want a redirect to the row", resp.StatusCode)
	}
}

// Pausing a tenant from the console is the pace's own pause
// (pace.Tenants, as owedctl tenants pause), confirmed first, audited.
func TestTenantPauseIsConfirmedAndAudited(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	c := b.login(t, "alice")
	_, page := do(t, c, "GET", b.srv.URL+"/console/pauses", nil, nil)
	form := url.Values{"csrf": {csrfOf(t, page)}, "do": {"pause-tenant"}, "name": {"globex"}}
	if resp, _ := do(t, c, "POST", b.srv.URL+"/console/pauses/action", form, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a pause without a reason answered %d, want 400", resp.StatusCode)
	}
	form.Set("why", "runaway campaign")
	if _, body := do(t, c, "POST", b.srv.URL+"/console/pauses/action", form, nil); !strings.Contains(body, "Yes, pause globex") {
		t.Fatalf("no confirmation: %s", body)
	}
	tenants := pace.NewTenants(b.stack.DB.App, nil)
	if list, _ := tenants.List(context.Background()); len(list) != 0 {
		t.Fatalf("paused before the confirmation: %+v", list)
	}
	form.Set("confirm", "yes")
	if resp, body := do(t, c, "POST", b.srv.URL+"/console/pauses/action", form, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, "globex is paused") {
		t.Fatalf("the confirmed pause answered %d: %s", resp.StatusCode, body)
	}
	list, err := tenants.List(context.Background())
	if err != nil || len(list) != 1 || list[0].Tenant != "globex" || list[0].Actor != "alice" || list[0].Reason != "runaway campaign" {
		t.Errorf("paused tenants %+v (%v), want globex by alice", list, err)
	}
	actions, err := b.stack.Ledger.OperatorActions(context.Background(), 10)
	if err != nil || len(actions) != 1 || actions[0].Action != "tenant_pause" || actions[0].Target != "tenant=globex" || actions[0].Operator != "alice" {
		t.Errorf("audit rows %+v (%v), want alice's tenant_pause", actions, err)
	}
}

// With Reads set (OWED_READ_DATABASE_URL, a replica), the notification
// pages read it, not the console's own ledger: here Reads is another
// database, holding a row the stack's does not.
func TestReadPagesGoToTheReadLedger(t *testing.T) {
	t.Parallel()
	replica := testdb.New(t)
	reads := ledger.New(replica.App, nil)
	if _, err := reads.Schedule(context.Background(), "acme", []ledger.NewNotification{{Recipient: "on-replica",
		Channel: "sms", Kind: "k", RefID: "R", DueAt: time.Now().Add(time.Hour), Payload: []byte(`{"text": "hi"}`)}}); err != nil {
		t.Fatal(err)
	}
	b := setup(t, token, "", func(o *console.Options) { o.Reads = reads })
	c := b.login(t, "alice")
	if _, page := do(t, c, "GET", b.srv.URL+"/console/notifications?tenant=acme", nil, nil); !strings.Contains(page, "on-replica") {
		t.Errorf("the notifications page did not read the read ledger:\n%s", page)
	}
}
