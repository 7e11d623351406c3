package api

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/tenant"
)

// ledgerBytes is what the ledger's tables take on disk, every partition
// and the shared payloads included (to_regclass: the table is absent
// before migrations/00017).
func (b *bundle) ledgerBytes(t *testing.T) int64 {
	t.Helper()
	var n int64
	if err := b.db.Owner.QueryRow(`SELECT (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('owed_notifications'))
	        + coalesce(pg_total_relation_size(to_regclass('owed_event_payloads')), 0)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// bigEvent is the request of issue 16: an 86 KB body naming one payload of
// about 62 KB (text that does not compress) and 1,000 recipients.
func bigEvent() string {
	rng := rand.New(rand.NewPCG(1, 2))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	text := make([]byte, 62000)
	for i := range text {
		text[i] = letters[rng.IntN(len(letters))]
	}
	var rec strings.Builder
	for i := range 1000 {
		if i > 0 {
			rec.WriteByte(',')
		}
		fmt.Fprintf(&rec, `{"recipient":"+1555%07d"}`, i)
	}
	return `{"kind":"digest","ref_id":"D-1","channel":"sms","payload":{"text":"` + string(text) + `"},` +
		`"occurred_at":"2026-03-01T12:00:00Z","recipients":[` + rec.String() + `]}`
}

// The 86 KB event that stood for 62 MB of rows is refused under the default
// cap, naming the list and the limit, and writes nothing; with the cap
// raised it is stored with its payload once, not once per recipient.
func TestBigEventIsRefusedOrStoredOnce(t *testing.T) {
	b := setup(t)
	body := bigEvent()
	if len(body) < 80<<10 || len(body) > 90<<10 {
		t.Fatalf("body is %d bytes, want about 86 KB", len(body))
	}
	before := b.ledgerBytes(t)
	r := b.do(t, http.MethodPost, "/v1/events", b.acme, body)
	e := expectField(t, r, http.StatusRequestEntityTooLarge, "recipients")
	if e.Code != codeExpandedTooLarge || !strings.Contains(e.Message, fmt.Sprint(MaxExpandedBytesDefault)) ||
		!strings.Contains(e.Message, "OWED_API_MAX_EXPANDED_BYTES") {
		t.Errorf("error %+v, want %s naming the limit %d and its setting", e, codeExpandedTooLarge, MaxExpandedBytesDefault)
	}
	if n := b.count(t, "acme"); n != 0 {
		t.Errorf("%d rows written by a refused request", n)
	}

	raised := New(Options{Ledger: b.ledger, Tokens: b.tokens, Log: zerolog.New(b.logs), Clock: b.clk,
		MaxExpandedBytes: 1 << 30})
	b.handler = raised
	r = b.do(t, http.MethodPost, "/v1/events", b.acme, body)
	expect(t, r, http.StatusOK)
	var n int
	var last int64
	if err := tenant.InTx(ctx, b.db.App, "acme", func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT count(*), max(id) FROM owed_notifications`).Scan(&n, &last)
	}); err != nil || n != 1000 {
		t.Fatalf("%d rows (%v), want 1000", n, err)
	}
	grew := b.ledgerBytes(t) - before
	t.Logf("1,000 recipients of a 62 KB payload: the ledger grew by %d bytes", grew)
	if grew > 4<<20 {
		t.Errorf("the ledger grew by %d bytes, want the payload stored once (well under 4 MiB)", grew)
	}
	var got struct {
		Payload struct{ Text string } `json:"payload"`
	}
	b.do(t, http.MethodGet, fmt.Sprintf("/v1/notifications/%d", last), b.acme, nil).data(t, &got)
	if len(got.Payload.Text) != 62000 {
		t.Errorf("the last row reads back a payload text of %d bytes, want 62000", len(got.Payload.Text))
	}
}

// NUL in any string is a 400 naming the field: PostgreSQL's text cannot
// hold it and jsonb refuses \u0000, which today surfaced as a 500.
func TestNULIsRefusedNamingTheField(t *testing.T) {
	b := setup(t)
	due := `"2026-03-01T12:00:00Z"`
	cases := []struct {
		method, path, body, field string
	}{
		{"POST", "/v1/notifications", `{"notifications":[{"recipient":"a\u0000b","channel":"sms","kind":"k","ref_id":"r","due_at":` + due + `,"payload":{"text":"hi"}}]}`, "notifications[0].recipient"},
		{"POST", "/v1/notifications", `{"notifications":[{"recipient":"a","channel":"sms","kind":"k","ref_id":"r\u0000","due_at":` + due + `,"payload":{"text":"hi"}}]}`, "notifications[0].ref_id"},
		{"POST", "/v1/notifications", `{"notifications":[{"recipient":"a","channel":"sms","kind":"k","ref_id":"r","due_at":` + due + `,"payload":{"text":"h\u0000i"}}]}`, "notifications[0].payload.text"},
		{"POST", "/v1/notifications", `{"notifications":[{"recipient":"a","channel":"webhook","kind":"k","ref_id":"r","due_at":` + due + `,"payload":{"data":{"deep":["\u0000"]}}}]}`, "notifications[0].payload.data"},
		{"POST", "/v1/events", `{"kind":"k\u0000","ref_id":"r","channel":"sms","payload":{"text":"hi"},"occurred_at":` + due + `,"recipients":[{"recipient":"a"}]}`, "kind"},
		{"POST", "/v1/events", `{"kind":"k","ref_id":"r","channel":"sms","payload":{"text":"hi"},"occurred_at":` + due + `,"recipients":[{"recipient":"a","payload":{"text":"\u0000"}}]}`, "recipients[0].payload.text"},
		{"POST", "/v1/notifications/cancel", `{"kind":"k","ref_id":"r\u0000"}`, "ref_id"},
		{"POST", "/v1/notifications/reschedule", `{"kind":"k\u0000","ref_id":"r","delay_seconds":60}`, "kind"},
		{"GET", "/v1/notifications?recipient=a%00b", "", "recipient"},
		{"GET", "/v1/notifications?ref=%ff", "", "ref"},
	}
	for _, c := range cases {
		var body any
		if c.body != "" {
			body = c.body
		}
		r := b.do(t, c.method, c.path, b.acme, body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s %s %s: status %d, want 400 naming %s; body %s", c.method, c.path, c.body, r.status, c.field, r.body)
			continue
		}
		if e := r.apiErr(t); e.Field != c.field {
			t.Errorf("%s %s: field %q, want %q (%s)", c.method, c.path, e.Field, c.field, e.Message)
		}
	}
}

// Inputs that passed the validator and then failed in the database (a 500)
// are refused up front, naming the field, or stored.
func TestAcceptedInputsNeverAnswer500(t *testing.T) {
	b := setup(t)
	one := func(channel, due, payload string) string {
		return `{"notifications":[{"recipient":"a","channel":"` + channel + `","kind":"k","ref_id":"r","due_at":"` + due +
			`","payload":` + payload + `}]}`
	}
	ok := "2026-03-01T12:00:00Z"
	cases := []struct {
		name, path, body string
		status           int
		field            string
	}{
		{"a time past 9999 in UTC", "/v1/notifications", one("sms", "9999-12-31T23:59:59-23:59", `{"text":"hi"}`), 400, "notifications[0].due_at"},
		{"a time before year 1 in UTC", "/v1/notifications", one("sms", "0001-01-01T00:00:00+01:00", `{"text":"hi"}`), 400, "notifications[0].due_at"},
		{"an event due past 9999", "/v1/events", `{"kind":"k","ref_id":"r","channel":"sms","payload":{"text":"hi"},"occurred_at":"9999-12-31T23:00:00Z","delay_seconds":86400,"recipients":[{"recipient":"a"}]}`, 400, "occurred_at"},
		{"a reschedule past 9999", "/v1/notifications/reschedule", `{"kind":"k","ref_id":"r","due_at":"9999-12-31T23:59:59-23:59"}`, 400, "due_at"},
		{"a number numeric overflows", "/v1/notifications", one("webhook", ok, `{"data":[1e100000]}`), 400, "notifications[0].payload.data"},
		{"nesting past the bound", "/v1/notifications", one("webhook", ok, `{"data":`+deep(100)+`}`), 400, "notifications[0].payload.data"},
		{"a payload over the limit as stored", "/v1/notifications", one("webhook", ok, spreadNumbers()), 400, "notifications[0].payload"},
		{"a lone surrogate", "/v1/notifications", one("sms", ok, `{"text":"\ud800"}`), 400, "notifications[0].payload.text"},
		{"duplicate keys", "/v1/notifications", one("sms", "2026-03-01T13:00:00Z", `{"text":"one","text":"two"}`), 200, ""},
		{"multibyte at the byte bound", "/v1/notifications", strings.Replace(one("sms", ok, `{"text":"hi"}`), `"recipient":"a"`, `"recipient":"`+strings.Repeat("é", 256)+`"`, 1), 200, ""},
	}
	for _, c := range cases {
		r := b.do(t, http.MethodPost, c.path, b.acme, c.body)
		if r.status != c.status {
			t.Errorf("%s: status %d, want %d; body %.300s", c.name, r.status, c.status, r.body)
			continue
		}
		if c.field != "" {
			if e := r.apiErr(t); e.Field != c.field {
				t.Errorf("%s: field %q, want %q (%s)", c.name, e.Field, c.field, e.Message)
			}
		}
	}
}

// A far expiry moved as far again by a snooze would pass the last instant a
// ledger time holds: once every read of the row answered 200 with no body,
// then the expiry was clamped (the window cut short). The move is refused,
// naming due_at and the latest due time the expiry allows, and the row keeps
// its times.
func TestFarExpiryMovedAheadIsRefused(t *testing.T) {
	b := setup(t)
	r := b.do(t, http.MethodPost, "/v1/notifications", b.acme, `{"notifications":[{"recipient":"a","channel":"sms",`+
		`"kind":"k","ref_id":"r","due_at":"2026-03-02T12:00:00Z","expires_at":"9999-12-01T00:00:00Z","payload":{"text":"hi"}}]}`)
	var s scheduleResult
	r.data(t, &s)
	e := expectField(t, b.do(t, http.MethodPost, "/v1/notifications/reschedule", b.acme,
		`{"kind":"k","ref_id":"r","due_at":"9000-01-01T00:00:00Z"}`), http.StatusBadRequest, "due_at")
	if !strings.Contains(e.Message, "2026-04-02T11:59:59.999999Z") {
		t.Errorf("message %q does not name the latest due_at, 2026-04-02T11:59:59.999999Z", e.Message)
	}
	var got struct {
		DueAt     string `json:"due_at"`
		ExpiresAt string `json:"expires_at"`
	}
	b.do(t, http.MethodGet, fmt.Sprintf("/v1/notifications/%d", s.Notifications[0].ID), b.acme, nil).data(t, &got)
	if got.DueAt != "2026-03-02T12:00:00Z" || got.ExpiresAt != "9999-12-01T00:00:00Z" {
		t.Errorf("row after the refused move: due %s expires %s, want its own times", got.DueAt, got.ExpiresAt)
	}
}
