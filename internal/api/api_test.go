package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/testdb"
)

var ctx = context.Background()

const serviceToken = "service-secret-for-tests-0123456789"

type bundle struct {
	db      *testdb.DB
	ledger  *ledger.Ledger
	tokens  *Tokens // as the application role: the handler's
	admin   *Tokens // as the token administrator: Create, Revoke, List
	handler http.Handler
	clk     *clock.Stub
	logs    *bytes.Buffer
	// acme and globex are tenant tokens.
	acme, globex string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	return newBundle(t)
}

// newBundle is setup's bundle, for a test that cannot run in parallel (a
// fuzz target).
func newBundle(t testing.TB) *bundle {
	t.Helper()
	b := &bundle{db: testdb.New(t), clk: clock.NewStub(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), logs: &bytes.Buffer{}}
	b.ledger = ledger.New(b.db.App, b.clk)
	b.tokens = NewTokens(b.db.App, b.clk)
	b.admin = NewTokens(b.db.Admin, b.clk)
	var err error
	if b.acme, _, err = b.admin.Create(ctx, "acme", "acme backend"); err != nil {
		t.Fatal(err)
	}
	if b.globex, _, err = b.admin.Create(ctx, "globex", ""); err != nil {
		t.Fatal(err)
	}
	b.handler = New(Options{Ledger: b.ledger, Tokens: b.tokens, ServiceToken: serviceToken,
		Log: zerolog.New(b.logs), Clock: b.clk})
	return b
}

// response is a decoded reply.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) data(t *testing.T, into any) {
	t.Helper()
	var env struct{ Data json.RawMessage }
	if err := json.Unmarshal(r.body, &env); err != nil || len(env.Data) == 0 {
		t.Fatalf("status %d, body %s: no data envelope (%v)", r.status, r.body, err)
	}
	if err := json.Unmarshal(env.Data, into); err != nil {
		t.Fatalf("decode data %s: %v", env.Data, err)
	}
}

func (r response) apiErr(t *testing.T) apiError {
	t.Helper()
	var env struct{ Error *apiError }
	if err := json.Unmarshal(r.body, &env); err != nil || env.Error == nil {
		t.Fatalf("status %d, body %s: no error envelope (%v)", r.status, r.body, err)
	}
	return *env.Error
}

func (b *bundle) do(t *testing.T, method, path, token string, body any) response {
	t.Helper()
	var rd *bytes.Reader
	switch v := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(v))
	case []byte:
		rd = bytes.NewReader(v)
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	contract.Handler(t, b.handler).ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// expect fails unless r has the status.
func expect(t *testing.T, r response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
}

// expectField fails unless r is a 400-class error naming field.
func expectField(t *testing.T, r response, status int, field string) apiError {
	t.Helper()
	expect(t, r, status)
	e := r.apiErr(t)
	if e.Field != field {
		t.Fatalf("error field %q, want %q; body %s", e.Field, field, r.body)
	}
	if !strings.Contains(e.Message, field) {
		t.Errorf("message %q does not name the field %q", e.Message, field)
	}
	return e
}

func note(recipient, ref string, due time.Time) map[string]any {
	return map[string]any{"recipient": recipient, "channel": "sms", "kind": "follow_up", "ref_id": ref,
		"due_at": due.Format(time.RFC3339), "payload": map[string]string{"text": "hello"}}
}

func batch(rows ...map[string]any) map[string]any {
	return map[string]any{"notifications": rows}
}

func TestScheduleGetAndFind(t *testing.T) {
	b := setup(t)
	due := b.clk.Now().Add(time.Hour)
	exp := due.Add(time.Hour)
	second := note("+15550002", "T-1", due)
	second["expires_at"] = exp.Format(time.RFC3339)
	r := b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", due), second))
	expect(t, r, http.StatusOK)
	var res scheduleResult
	r.data(t, &res)
	if len(res.Notifications) != 2 || res.Created != 2 || res.Existing != 0 {
		t.Fatalf("result %+v, want two created rows", res)
	}
	for _, n := range res.Notifications {
		if n.ID == 0 || !n.Created || n.State != ledger.StatePending {
			t.Errorf("row %+v, want a created pending row", n)
		}
	}

	r = b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d", res.Notifications[1].ID), b.acme, nil)
	expect(t, r, http.StatusOK)
	var d detailResponse
	r.data(t, &d)
	if d.Tenant != "acme" || d.Recipient != "+15550002" || !d.DueAt.Equal(due) || d.ExpiresAt == nil ||
		!d.ExpiresAt.Equal(exp) || d.State != ledger.StatePending || d.History == nil {
		t.Errorf("detail %+v, want acme's pending row for +15550002 due %s expiring %s", d, due, exp)
	}

	r = b.do(t, "GET", "/v1/notifications?recipient=%2B15550001&ref=T-1", b.acme, nil)
	expect(t, r, http.StatusOK)
	var list struct {
		Notifications []ledger.Notification
		Limit         int
	}
	r.data(t, &list)
	if len(list.Notifications) != 1 || list.Notifications[0].ID != res.Notifications[0].ID ||
		list.Limit != ledger.MaxFindLimit {
		t.Errorf("find returned %+v, want exactly row %d", list, res.Notifications[0].ID)
	}
}

// The compliance answer: a delivered row says when, through which provider,
// under which provider message id, after how many attempts.
func TestGetShowsDelivery(t *testing.T) {
	b := setup(t)
	var res scheduleResult
	b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", b.clk.Now()))).data(t, &res)
	id := res.Notifications[0].ID
	c, err := b.ledger.ClaimForSend(ctx, "acme", id, ledger.ClaimParams{DueAt: b.clk.Now(), LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ledger.SettleDelivered(ctx, c.Hold, ledger.Attempt{Attempt: 1, Provider: "sandbox",
		StartedAt: b.clk.Now(), FinishedAt: b.clk.Now(), ProviderMessageID: "msg-1"}); err != nil {
		t.Fatal(err)
	}
	r := b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d", id), b.acme, nil)
	expect(t, r, http.StatusOK)
	var d detailResponse
	r.data(t, &d)
	if d.State != ledger.StateDelivered || d.DeliveredAt == nil || !d.DeliveredAt.Equal(b.clk.Now()) ||
		d.ProviderMessageID != "msg-1" || d.Attempts != 1 || len(d.History) != 1 ||
		d.History[0].ProviderMessageID != "msg-1" {
		t.Fatalf("detail %s, want delivered at %s as msg-1 after one attempt with its history", r.body, b.clk.Now())
	}
}

func TestScheduleReplayReturnsSameIDs(t *testing.T) {
	b := setup(t)
	body := batch(note("+15550001", "T-1", b.clk.Now()), note("+15550002", "T-1", b.clk.Now()))
	var first, second scheduleResult
	b.do(t, "POST", "/v1/notifications", b.acme, body).data(t, &first)
	r := b.do(t, "POST", "/v1/notifications", b.acme, body)
	expect(t, r, http.StatusOK)
	r.data(t, &second)
	if second.Created != 0 || second.Existing != 2 {
		t.Fatalf("replay %+v, want 0 created and 2 existing", second)
	}
	for i := range first.Notifications {
		if first.Notifications[i].ID != second.Notifications[i].ID || second.Notifications[i].Created {
			t.Errorf("row %d: first %+v, replay %+v; want the same id with created=false",
				i, first.Notifications[i], second.Notifications[i])
		}
	}
}

func (b *bundle) count(t *testing.T, tenant string) int {
	t.Helper()
	rows, err := b.ledger.Find(ctx, tenant, ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

func TestScheduleValidationNamesTheFieldAndWritesNothing(t *testing.T) {
	b := setup(t)
	good := note("+15550001", "T-1", b.clk.Now())
	noRecipient := note("", "T-2", b.clk.Now())
	badDue := note("+15550003", "T-3", b.clk.Now())
	badDue["due_at"] = "tomorrow"
	badChannel := note("+15550004", "T-4", b.clk.Now())
	badChannel["channel"] = "pigeon"
	email := note("a@example.com", "T-5", b.clk.Now())
	email["channel"] = "email"
	early := note("+15550006", "T-6", b.clk.Now())
	early["expires_at"] = b.clk.Now().Add(-time.Minute).Format(time.RFC3339)
	cases := []struct {
		name  string
		body  any
		field string
		code  string
	}{
		{"missing recipient", batch(good, noRecipient), "notifications[1].recipient", codeInvalidField},
		{"bad time", batch(good, badDue), "notifications[1].due_at", codeInvalidField},
		{"bad channel", batch(good, badChannel), "notifications[1].channel", codeInvalidField},
		{"email without subject", batch(email), "notifications[0].payload.subject", codeInvalidField},
		{"expiry before due", batch(early), "notifications[0].expires_at", codeInvalidField},
		{"empty batch", batch(), "notifications", codeInvalidField},
		{"wrong type", `{"notifications": {"recipient": "x"}}`, "notifications", codeInvalidField},
		{"unknown top-level field", `{"notifications": [], "notificatons": []}`, "notificatons", codeUnknownField},
		{"unknown row field", `{"notifications": [{"recipent": "+1555"}]}`, "recipent", codeUnknownField},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := expectField(t, b.do(t, "POST", "/v1/notifications", b.acme, c.body), http.StatusBadRequest, c.field)
			if e.Code != c.code {
				t.Errorf("code %q, want %q", e.Code, c.code)
			}
		})
	}
	if n := b.count(t, "acme"); n != 0 {
		t.Fatalf("%d rows written by rejected requests, want none", n)
	}

	// Every bad field of a batch is reported, not only the first.
	r := b.do(t, "POST", "/v1/notifications", b.acme, batch(noRecipient, badChannel))
	expect(t, r, http.StatusBadRequest)
	if e := r.apiErr(t); len(e.Details) != 2 {
		t.Errorf("details %+v, want both bad fields", e.Details)
	}
	// A batch over the ledger's limit is rejected whole.
	rows := make([]map[string]any, ledger.MaxScheduleBatch+1)
	for i := range rows {
		rows[i] = note(fmt.Sprintf("+1555%06d", i), "T-big", b.clk.Now())
	}
	expectField(t, b.do(t, "POST", "/v1/notifications", b.acme, batch(rows...)), http.StatusBadRequest, "notifications")
	if n := b.count(t, "acme"); n != 0 {
		t.Fatalf("%d rows written by rejected requests, want none", n)
	}
}

func TestMalformedBodies(t *testing.T) {
	b := setup(t)
	for _, body := range []string{"", "{", `{"notifications": []} {}`, `[1,2]`, "null x"} {
		r := b.do(t, "POST", "/v1/notifications", b.acme, body)
		expect(t, r, http.StatusBadRequest)
		if e := r.apiErr(t); e.Code != codeMalformedJSON && e.Code != codeInvalidField {
			t.Errorf("body %q: code %q, want malformed_json", body, e.Code)
		}
	}
}

func TestBodyOverOneMiBIs413(t *testing.T) {
	b := setup(t)
	big := `{"notifications": [], "pad": "` + strings.Repeat("x", MaxBodyBytes) + `"}`
	r := b.do(t, "POST", "/v1/notifications", b.acme, big)
	expect(t, r, http.StatusRequestEntityTooLarge)
	if e := r.apiErr(t); e.Code != codeTooLarge {
		t.Errorf("code %q, want %q", e.Code, codeTooLarge)
	}
}

func TestWrongContentTypeIs415(t *testing.T) {
	b := setup(t)
	req := httptest.NewRequest("POST", "/v1/notifications", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+b.acme)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	contract.Handler(t, b.handler).ServeHTTP(rec, req)
	if rec.Code != http.StatusUnsupportedMediaType {
		t.Fatalf("status %d, want 415", rec.Code)
	}
}

func TestAuthentication(t *testing.T) {
	b := setup(t)
	revoked, id, err := b.admin.Create(ctx, "acme", "old")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.admin.Revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	for name, token := range map[string]string{
		"missing":  "",
		"unknown":  TokenPrefix + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"no shape": "hunter2",
		"revoked":  revoked,
	} {
		r := b.do(t, "GET", "/v1/notifications", token, nil)
		expect(t, r, http.StatusUnauthorized)
		if r.apiErr(t).Code != codeUnauthorized || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s token: body %s, headers %v; want unauthorized with WWW-Authenticate", name, r.body, r.header)
		}
	}
	// A token never appears in a log line, valid or not.
	for _, secret := range []string{b.acme, revoked, serviceToken} {
		if strings.Contains(b.logs.String(), secret) {
			t.Fatalf("a token appears in the logs")
		}
	}
	b.do(t, "GET", "/v1/notifications?tenant=acme", serviceToken, nil)
	if strings.Contains(b.logs.String(), serviceToken) || strings.Contains(b.logs.String(), b.acme) {
		t.Fatalf("a token appears in the logs")
	}
}

func TestTenantTokenCannotTouchAnotherTenant(t *testing.T) {
	b := setup(t)
	due := b.clk.Now().Add(time.Hour)
	var globexRows scheduleResult
	r := b.do(t, "POST", "/v1/notifications", b.globex, batch(note("+15559999", "G-1", due)))
	expect(t, r, http.StatusOK)
	r.data(t, &globexRows)
	id := globexRows.Notifications[0].ID

	// Naming the other tenant is refused outright.
	expectField(t, b.do(t, "GET", "/v1/notifications?tenant=globex", b.acme, nil), http.StatusForbidden, "tenant")
	expectField(t, b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d?tenant=globex", id), b.acme, nil),
		http.StatusForbidden, "tenant")
	withTenant := batch(note("+15559999", "G-2", due))
	withTenant["tenant_id"] = "globex"
	expectField(t, b.do(t, "POST", "/v1/notifications", b.acme, withTenant), http.StatusForbidden, "tenant_id")
	expectField(t, b.do(t, "POST", "/v1/notifications/cancel", b.acme,
		map[string]string{"tenant_id": "globex", "kind": "follow_up", "ref_id": "G-1"}), http.StatusForbidden, "tenant_id")

	// In its own scope, the other tenant's rows simply do not exist.
	expect(t, b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d", id), b.acme, nil), http.StatusNotFound)
	var list struct{ Notifications []ledger.Notification }
	b.do(t, "GET", "/v1/notifications?ref=G-1", b.acme, nil).data(t, &list)
	if len(list.Notifications) != 0 {
		t.Errorf("acme sees %d of globex's rows", len(list.Notifications))
	}
	var changed ledger.ChangeResult
	r = b.do(t, "POST", "/v1/notifications/cancel", b.acme, map[string]string{"kind": "follow_up", "ref_id": "G-1"})
	expect(t, r, http.StatusOK)
	r.data(t, &changed)
	if changed.Changed != 0 {
		t.Errorf("acme's cancel changed %d globex rows", changed.Changed)
	}
	r = b.do(t, "POST", "/v1/notifications/reschedule", b.acme,
		map[string]string{"kind": "follow_up", "ref_id": "G-1", "due_at": due.Add(time.Hour).Format(time.RFC3339)})
	expect(t, r, http.StatusOK)
	r.data(t, &changed)
	if changed.Changed != 0 {
		t.Errorf("acme's reschedule moved %d globex rows", changed.Changed)
	}

	d, err := b.ledger.Get(ctx, "globex", id)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != ledger.StatePending || !d.DueAt.Equal(due) {
		t.Errorf("globex's row is now %s due %s; want it untouched (pending, due %s)", d.State, d.DueAt, due)
	}
	if n := b.count(t, "globex"); n != 1 {
		t.Errorf("globex has %d rows, want 1", n)
	}
}

func TestServiceTokenMustNameTheTenant(t *testing.T) {
	b := setup(t)
	body := batch(note("+15550001", "T-1", b.clk.Now()))
	expectField(t, b.do(t, "POST", "/v1/notifications", serviceToken, body), http.StatusBadRequest, "tenant_id")
	expectField(t, b.do(t, "GET", "/v1/notifications", serviceToken, nil), http.StatusBadRequest, "tenant")
	expectField(t, b.do(t, "GET", "/v1/notifications/1", serviceToken, nil), http.StatusBadRequest, "tenant")

	body["tenant_id"] = "globex"
	var res scheduleResult
	r := b.do(t, "POST", "/v1/notifications", serviceToken, body)
	expect(t, r, http.StatusOK)
	r.data(t, &res)
	if res.Created != 1 || b.count(t, "globex") != 1 || b.count(t, "acme") != 0 {
		t.Fatalf("service token scheduled %+v; want one row in globex only", res)
	}
	expect(t, b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d?tenant=globex", res.Notifications[0].ID),
		serviceToken, nil), http.StatusOK)
	expect(t, b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d?tenant=acme", res.Notifications[0].ID),
		serviceToken, nil), http.StatusNotFound)
}

func TestCancel(t *testing.T) {
	b := setup(t)
	expect(t, b.do(t, "POST", "/v1/notifications", b.acme,
		batch(note("+15550001", "T-1", b.clk.Now()), note("+15550002", "T-1", b.clk.Now()), note("+15550001", "T-2", b.clk.Now()))),
		http.StatusOK)
	r := b.do(t, "POST", "/v1/notifications/cancel", b.acme, map[string]string{"kind": "follow_up", "ref_id": "T-1"})
	expect(t, r, http.StatusOK)
	var res ledger.ChangeResult
	r.data(t, &res)
	if res.Changed != 2 {
		t.Fatalf("cancel changed %d rows, want 2", res.Changed)
	}
	rows, err := b.ledger.Find(ctx, "acme", ledger.Filter{RefID: "T-2"})
	if err != nil || len(rows) != 1 || rows[0].State != ledger.StatePending {
		t.Fatalf("T-2 rows %+v (%v), want one pending row untouched", rows, err)
	}
	expectField(t, b.do(t, "POST", "/v1/notifications/cancel", b.acme, map[string]string{"kind": "follow_up"}),
		http.StatusBadRequest, "ref_id")
}

func TestReschedule(t *testing.T) {
	b := setup(t)
	due := b.clk.Now().Add(time.Hour)
	expect(t, b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", due))), http.StatusOK)

	// A snooze: delay_seconds counts from now.
	r := b.do(t, "POST", "/v1/notifications/reschedule", b.acme,
		map[string]any{"kind": "follow_up", "ref_id": "T-1", "delay_seconds": 7200})
	expect(t, r, http.StatusOK)
	var res ledger.ChangeResult
	r.data(t, &res)
	rows, err := b.ledger.Find(ctx, "acme", ledger.Filter{RefID: "T-1"})
	if err != nil || res.Changed != 1 || len(rows) != 1 || !rows[0].DueAt.Equal(b.clk.Now().Add(2*time.Hour)) {
		t.Fatalf("after snooze: result %+v, rows %+v (%v); want one row due %s", res, rows, err, b.clk.Now().Add(2*time.Hour))
	}

	expectField(t, b.do(t, "POST", "/v1/notifications/reschedule", b.acme,
		map[string]any{"kind": "follow_up", "ref_id": "T-1"}), http.StatusBadRequest, "due_at")
	expectField(t, b.do(t, "POST", "/v1/notifications/reschedule", b.acme,
		map[string]any{"kind": "follow_up", "ref_id": "T-1", "due_at": "soon"}), http.StatusBadRequest, "due_at")
	expectField(t, b.do(t, "POST", "/v1/notifications/reschedule", b.acme,
		map[string]any{"kind": "follow_up", "ref_id": "T-1", "delay_seconds": -1}), http.StatusBadRequest, "delay_seconds")

	// Two open rows of one subject for one recipient cannot both move to the
	// same due time: that is the ledger's conflict, a 409.
	expect(t, b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", due))), http.StatusOK)
	r = b.do(t, "POST", "/v1/notifications/reschedule", b.acme,
		map[string]any{"kind": "follow_up", "ref_id": "T-1", "due_at": b.clk.Now().Add(3 * time.Hour).Format(time.RFC3339)})
	expectField(t, r, http.StatusConflict, "due_at")
}

func TestEventFanOut(t *testing.T) {
	b := setup(t)
	occurred := b.clk.Now().Add(-time.Minute)
	event := map[string]any{
		"kind": "shipment_held", "ref_id": "SHP-1", "channel": "sms",
		"payload":     map[string]string{"text": "Your parcel is held at customs"},
		"occurred_at": occurred.Format(time.RFC3339), "delay_seconds": 86400, "expires_in_seconds": 3600,
		"recipients": []map[string]any{
			{"recipient": "+15550001"},
			{"recipient": "merchant@example.com", "channel": "email",
				"payload": map[string]string{"subject": "Held at customs", "text": "SHP-1 is held"}},
			{"recipient": "agent-7", "channel": "slack"},
			{"recipient": "https://wh.example.com/hook", "channel": "webhook",
				"payload": map[string]any{"data": map[string]string{"shipment": "SHP-1"}}},
		},
	}
	r := b.do(t, "POST", "/v1/events", b.acme, event)
	expect(t, r, http.StatusOK)
	var first scheduleResult
	r.data(t, &first)
	if first.Created != 4 || len(first.Notifications) != 4 || first.Notifications[2].Recipient != "agent-7" {
		t.Fatalf("fan-out %+v, want four created rows in recipient order", first)
	}
	rows, err := b.ledger.Find(ctx, "acme", ledger.Filter{RefID: "SHP-1"})
	if err != nil || len(rows) != 4 {
		t.Fatalf("rows %d (%v), want 4", len(rows), err)
	}
	wantDue := occurred.Add(24 * time.Hour)
	channels := map[string]string{}
	for _, n := range rows {
		channels[n.Recipient] = n.Channel
		if !n.DueAt.Equal(wantDue) || n.ExpiresAt == nil || !n.ExpiresAt.Equal(wantDue.Add(time.Hour)) ||
			n.Kind != "shipment_held" {
			t.Errorf("row %+v, want kind shipment_held due %s expiring an hour later", n, wantDue)
		}
	}
	if channels["+15550001"] != "sms" || channels["merchant@example.com"] != "email" || channels["agent-7"] != "slack" {
		t.Errorf("channels %v: a recipient's channel overrides the event's", channels)
	}

	// The same event again is the same rows.
	var again scheduleResult
	r = b.do(t, "POST", "/v1/events", b.acme, event)
	expect(t, r, http.StatusOK)
	r.data(t, &again)
	if again.Created != 0 || again.Existing != 4 {
		t.Fatalf("replay %+v, want 4 existing", again)
	}
	for i := range first.Notifications {
		if first.Notifications[i].ID != again.Notifications[i].ID {
			t.Errorf("recipient %d: id %d then %d", i, first.Notifications[i].ID, again.Notifications[i].ID)
		}
	}
}

func TestEventValidation(t *testing.T) {
	b := setup(t)
	base := func() map[string]any {
		return map[string]any{
			"kind": "ticket_update", "ref_id": "TCK-1", "channel": "sms",
			"payload":     map[string]string{"text": "updated"},
			"occurred_at": b.clk.Now().Format(time.RFC3339),
			"recipients":  []map[string]any{{"recipient": "+15550001"}, {"recipient": "+15550002"}},
		}
	}
	cases := map[string]struct {
		change func(map[string]any)
		field  string
	}{
		"no occurred_at":    {func(e map[string]any) { delete(e, "occurred_at") }, "occurred_at"},
		"no recipients":     {func(e map[string]any) { e["recipients"] = []any{} }, "recipients"},
		"blank recipient":   {func(e map[string]any) { e["recipients"] = []map[string]any{{"recipient": "+1"}, {"recipient": " "}} }, "recipients[1].recipient"},
		"recipient channel": {func(e map[string]any) { e["recipients"] = []map[string]any{{"recipient": "a", "channel": "fax"}} }, "recipients[0].channel"},
		"event payload":     {func(e map[string]any) { e["payload"] = map[string]string{"txt": "x"} }, "payload"},
		"no kind":           {func(e map[string]any) { delete(e, "kind") }, "kind"},
		"negative delay":    {func(e map[string]any) { e["delay_seconds"] = -5 }, "delay_seconds"},
		"both expiries": {func(e map[string]any) {
			e["expires_in_seconds"] = 60
			e["expires_at"] = b.clk.Now().Add(time.Hour).Format(time.RFC3339)
		}, "expires_in_seconds"},
		"expiry before due": {func(e map[string]any) { e["expires_at"] = b.clk.Now().Format(time.RFC3339) }, "expires_at"},
		"unknown field":     {func(e map[string]any) { e["recipient"] = "x" }, "recipient"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			e := base()
			c.change(e)
			expectField(t, b.do(t, "POST", "/v1/events", b.acme, e), http.StatusBadRequest, c.field)
		})
	}
	if n := b.count(t, "acme"); n != 0 {
		t.Fatalf("%d rows written by rejected events, want none", n)
	}
}

func TestRoutingErrorsAreJSON(t *testing.T) {
	b := setup(t)
	r := b.do(t, "DELETE", "/v1/notifications", b.acme, nil)
	expect(t, r, http.StatusMethodNotAllowed)
	if e := r.apiErr(t); e.Code != codeMethodNotAllowed || !strings.Contains(r.header.Get("Allow"), "POST") {
		t.Errorf("body %s, Allow %q; want method_not_allowed listing POST", r.body, r.header.Get("Allow"))
	}
	expect(t, b.do(t, "GET", "/v1/notifications/cancel", b.acme, nil), http.StatusBadRequest)
	r = b.do(t, "GET", "/v1/nothing-here", b.acme, nil)
	expect(t, r, http.StatusNotFound)
	if r.apiErr(t).Code != codeNotFound {
		t.Errorf("body %s, want not_found", r.body)
	}
	expectField(t, b.do(t, "GET", "/v1/notifications/abc", b.acme, nil), http.StatusBadRequest, "id")
	expectField(t, b.do(t, "GET", "/v1/notifications?recipent=x", b.acme, nil), http.StatusBadRequest, "recipent")
	expectField(t, b.do(t, "GET", "/v1/notifications?ref=a&ref=b", b.acme, nil), http.StatusBadRequest, "ref")
	expectField(t, b.do(t, "GET", "/v1/notifications?limit=0", b.acme, nil), http.StatusBadRequest, "limit")
}
