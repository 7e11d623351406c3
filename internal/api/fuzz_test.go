package api

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/owedhq/owed/internal/ledger"
)

// The fuzz targets feed arbitrary input to each request decoder. Each must
// never panic, must refuse a bad input with a 4xx that has a code and a
// message (and names the field for a field error), and anything it accepts
// must be what the ledger accepts: the handler's only remaining step is the
// ledger call. The seeds run as regular tests under `go test`, and
// TestSeedsNeverAnswer500 sends every one through the real API.

var fuzzNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var acmeToken = principal{tenant: "acme"}

// deep nests a JSON value n arrays deep.
func deep(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }

// spreadNumbers is a webhook payload of compact JSON that the database
// stores with a space after every comma: about 44,000 bytes as sent,
// 66,000 as stored.
func spreadNumbers() string {
	return `{"data":[` + strings.TrimSuffix(strings.Repeat("1,", 22000), ",") + `]}`
}

func scheduleSeed(field, value string) string {
	n := map[string]any{"recipient": "+15550001", "channel": "sms", "kind": "k", "ref_id": "r",
		"due_at": "2026-03-01T12:00:00Z", "payload": json.RawMessage(`{"text":"hi"}`)}
	if strings.HasPrefix(value, "{") || strings.HasPrefix(value, "[") {
		n[field] = json.RawMessage(value)
	} else {
		n[field] = value
	}
	b, _ := json.Marshal(map[string]any{"notifications": []any{n}})
	return string(b)
}

var scheduleSeeds = []string{
	`{"notifications":[{"recipient":"+15550001","channel":"sms","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00Z","payload":{"text":"hi"}}]}`,
	`{"tenant_id":"acme","notifications":[{"recipient":"a@example.com","channel":"email","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00Z","expires_at":"2026-03-01T13:00:00Z","payload":{"subject":"s","text":"t"}}]}`,
	`{"tenant_id":"globex","notifications":[]}`,
	`{"notifications":[{"recipient":"x","channel":"webhook","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00+02:00","payload":{"data":[1,2]}}]}`,
	`{"notifications":[{"due_at":"not a time","expires_at":"2026-02-30T00:00:00Z"}]}`,
	`{"notifications":[{"payload":null}]}`,
	`{"notifications":{"a":1}}`,
	`{"notifications":[1]}`,
	`{"unknown":true}`,
	`{"notifications":[]} trailing`,
	`[]`, `null`, `""`, `{`, ``, "\x00", `{"tenant_id":1}`,
	`{"tenant_id":"ac\u0000me","notifications":[]}`,
	scheduleSeed("recipient", "a\x00b"),
	scheduleSeed("kind", "k\x00"),
	scheduleSeed("ref_id", strings.Repeat("é", 129)),
	scheduleSeed("recipient", strings.Repeat("€", 171)),
	scheduleSeed("payload", `{"text":"a\u0000b"}`),
	scheduleSeed("payload", `{"text":"hi","extras":{"k\u0000":"v"}}`),
	scheduleSeed("payload", `{"text":"lone \ud800 surrogate"}`),
	scheduleSeed("payload", `{"text":"one","text":"two"}`),
	scheduleSeed("due_at", "9999-12-31T23:59:59-23:59"),
	scheduleSeed("due_at", "0000-01-01T00:00:00+01:00"),
	scheduleSeed("due_at", "0001-01-01T00:00:00Z"),
	scheduleSeed("expires_at", "9999-12-31T23:59:59-01:00"),
	`{"notifications":[{"recipient":"x","channel":"sms","kind":"k","ref_id":"r","due_local":"2027-03-28T02:30","time_zone":"Europe/Berlin","expires_local":"2027-03-28T09:00","payload":{"text":"hi"}}]}`,
	`{"notifications":[{"recipient":"x","channel":"sms","kind":"k","ref_id":"r","due_local":"2027-11-07T01:30","time_zone":"America/New_York","disambiguation":"reject","payload":{"text":"hi"}}]}`,
	`{"notifications":[{"recipient":"x","channel":"sms","kind":"k","ref_id":"r","due_local":"2027-11-07T01:30","payload":{"text":"hi"}}]}`,
	`{"notifications":[{"recipient":"x","channel":"sms","kind":"k","ref_id":"r","due_local":"0001-01-01T00:00","time_zone":"Asia/Tokyo","payload":{"text":"hi"}}]}`,
	`{"notifications":[{"recipient":"x","channel":"sms","kind":"k","ref_id":"r","due_local":"9999-12-31T23:59","time_zone":"America/Los_Angeles","payload":{"text":"hi"}}]}`,
	`{"notifications":[{"recipient":"x","channel":"sms","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00Z","time_zone":"Local","disambiguation":"later","payload":{"text":"hi"}}]}`,
	`{"notifications":[{"recipient":"x","channel":"webhook","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00Z","payload":{"data":[1e100000]}}]}`,
	`{"notifications":[{"recipient":"x","channel":"webhook","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00Z","payload":{"data":[1e999, -1e-999, 0.5e1]}}]}`,
	`{"notifications":[{"recipient":"x","channel":"webhook","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00Z","payload":{"data":` + deep(64) + `}}]}`,
	`{"notifications":[{"recipient":"x","channel":"webhook","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00Z","payload":{"data":` + deep(5000) + `}}]}`,
	`{"notifications":[{"recipient":"x","channel":"webhook","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00Z","payload":` + spreadNumbers() + `}]}`,
}

func eventSeed(extra string) string {
	return `{"kind":"k","ref_id":"r","channel":"sms","payload":{"text":"hi"},"occurred_at":"2026-03-01T12:00:00Z",` +
		`"recipients":[{"recipient":"+15550001"},{"recipient":"+15550002","payload":{"text":"own"}}]` + extra + `}`
}

var eventSeeds = []string{
	eventSeed(``),
	eventSeed(`,"delay_seconds":3600,"expires_in_seconds":60`),
	eventSeed(`,"expires_at":"2026-03-01T13:00:00Z"`),
	eventSeed(`,"delay_seconds":31622400`),
	eventSeed(`,"delay_seconds":1e30`),
	eventSeed(`,"delay_seconds":-1`),
	eventSeed(`,"delay_seconds":1.5`),
	eventSeed(`,"expires_at":"9999-12-31T23:59:59-23:00"`),
	eventSeed(`,"tenant_id":"globex"`),
	`{"kind":"k","ref_id":"r","channel":"sms","payload":{"text":"hi"},"occurred_at":"9999-12-31T23:00:00Z","delay_seconds":86400,"recipients":[{"recipient":"a"}]}`,
	`{"kind":"k\u0000","ref_id":"r","channel":"sms","payload":{"text":"hi"},"occurred_at":"2026-03-01T12:00:00Z","recipients":[{"recipient":"a"}]}`,
	`{"kind":"k","ref_id":"r","channel":"sms","payload":{"text":"h\u0000i"},"occurred_at":"2026-03-01T12:00:00Z","recipients":[{"recipient":"a"}]}`,
	`{"kind":"k","ref_id":"r","channel":"sms","payload":{"text":"hi"},"occurred_at":"2026-03-01T12:00:00Z","recipients":[{"recipient":"a","channel":"fax"}]}`,
	`{"kind":"k","ref_id":"r","channel":"sms","payload":{"text":"hi"},"occurred_at":"2026-03-01T12:00:00Z","recipients":[]}`,
	`{"kind":"k","ref_id":"r","channel":"sms","payload":{"text":"hi"},"occurred_at":"2026-03-01T12:00:00Z","recipients":[{}]}`,
	`{"recipients":null}`, `{"occurred_at":"x"}`, `{}`, `[]`, ``,
}

func subjectSeed(kind, ref string) string {
	b, _ := json.Marshal(map[string]string{"kind": kind, "ref_id": ref})
	return string(b)
}

var subjectSeeds = []string{
	subjectSeed("k", "r"),
	subjectSeed("", "r"),
	subjectSeed("k\x00", "r"),
	subjectSeed("k", strings.Repeat("é", 129)),
	subjectSeed(strings.Repeat("k", 129), "r"),
	`{"tenant_id":"globex","kind":"k","ref_id":"r"}`,
	`{"tenant_id":"acme","kind":"k","ref_id":"r"}`,
	`{"kind":1}`, `{"kind":"k","ref_id":"r","extra":1}`, `{}`, `[]`, ``,
}

var rescheduleSeeds = []string{
	`{"kind":"k","ref_id":"r","due_at":"2026-03-02T12:00:00Z"}`,
	`{"kind":"k","ref_id":"r","delay_seconds":600}`,
	`{"kind":"k","ref_id":"r","delay_seconds":600,"due_at":"2026-03-02T12:00:00Z"}`,
	`{"kind":"k","ref_id":"r"}`,
	`{"kind":"k","ref_id":"r","due_at":"9999-12-31T23:59:59-23:59"}`,
	`{"kind":"k","ref_id":"r","due_at":"0000-01-01T00:00:00+23:00"}`,
	`{"kind":"k","ref_id":"r","delay_seconds":99999999999}`,
	`{"kind":"k","ref_id":"r\u0000","delay_seconds":1}`,
	`{"kind":"","ref_id":"r","delay_seconds":1}`,
	`{"kind":"k","ref_id":"r","delay_seconds":"1"}`, `{}`, ``,
}

var findSeeds = []string{
	``, `recipient=%2B15550001`, `ref=r&kind=k&limit=10`, `limit=0`, `limit=`, `tenant=`, `limit=501`, `limit=abc`,
	`tenant=acme`, `tenant=globex`, `recipient=a%00b`, `ref=%ff%fe`, `kind=` + strings.Repeat("%C3%A9", 300),
	`recipent=x`, `ref=a&ref=b`, `tenant=a%00`,
}

var getSeeds = [][2]string{
	{"1", ""}, {"0", ""}, {"-1", ""}, {"abc", ""}, {"99999999999999999999", ""}, {"1", "tenant=acme"},
	{"1", "tenant=globex"}, {"1", "x=1"}, {"1", "tenant=%00"},
}

// checkRefusal fails unless e is a well-formed client error.
func checkRefusal(t *testing.T, input any, e *apiError) {
	t.Helper()
	if e.Status < 400 || e.Status >= 500 || e.Code == "" || e.Message == "" {
		t.Fatalf("input %q: error %+v, want a 4xx with a code and a message", input, e)
	}
	if (e.Code == codeInvalidField || e.Code == codeUnknownField) && (e.Field == "" || !strings.Contains(e.Message, e.Field)) {
		t.Fatalf("input %q: error %+v does not name its field", input, e)
	}
	if _, err := json.Marshal(map[string]*apiError{"error": e}); err != nil {
		t.Fatalf("input %q: error does not encode: %v", input, err)
	}
}

func FuzzSchedule(f *testing.F) {
	for _, s := range scheduleSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		tenant, rows, e := decodeSchedule(body, acmeToken, MaxExpandedBytesDefault)
		if e != nil {
			checkRefusal(t, body, e)
			return
		}
		if tenant != "acme" {
			t.Fatalf("tenant %q, want the token's tenant", tenant)
		}
		if err := ledger.Validate(tenant, rows); err != nil {
			t.Fatalf("body %q accepted, but the ledger refuses it: %v", body, err)
		}
	})
}

func FuzzEvent(f *testing.F) {
	for _, s := range eventSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		tenant, rows, e := decodeEvent(body, acmeToken, MaxExpandedBytesDefault)
		if e != nil {
			checkRefusal(t, body, e)
			return
		}
		if err := ledger.Validate(tenant, rows); err != nil {
			t.Fatalf("body %q accepted, but the ledger refuses it: %v", body, err)
		}
	})
}

func FuzzSubject(f *testing.F) {
	for _, s := range subjectSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		tenant, req, e := decodeSubject(body, acmeToken)
		if e != nil {
			checkRefusal(t, body, e)
			return
		}
		if err := ledger.ValidateCancel(tenant, req.Kind, req.RefID); err != nil {
			t.Fatalf("body %q accepted, but the ledger refuses it: %v", body, err)
		}
	})
}

func FuzzReschedule(f *testing.F) {
	for _, s := range rescheduleSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		tenant, req, e := decodeReschedule(body, acmeToken, fuzzNow)
		if e != nil {
			checkRefusal(t, body, e)
			return
		}
		if err := ledger.ValidateReschedule(tenant, req.Kind, req.RefID, req.due); err != nil {
			t.Fatalf("body %q accepted, but the ledger refuses it: %v", body, err)
		}
	})
}

func FuzzFind(f *testing.F) {
	for _, s := range findSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		out, e := decodeFind(q, acmeToken)
		if e != nil {
			checkRefusal(t, query, e)
			return
		}
		if out.tenant != "acme" || out.filter.Limit < 0 || out.filter.Limit > ledger.MaxFindLimit {
			t.Fatalf("query %q: accepted as %+v", query, out)
		}
		for _, v := range []string{out.filter.Recipient, out.filter.RefID, out.filter.Kind} {
			if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
				t.Fatalf("query %q: accepted %q, which the database cannot compare", query, v)
			}
		}
	})
}

func FuzzGet(f *testing.F) {
	for _, s := range getSeeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, id, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		tenant, n, e := decodeGet(id, q, acmeToken)
		if e != nil {
			checkRefusal(t, id+"?"+query, e)
			return
		}
		if tenant != "acme" || n < 1 {
			t.Fatalf("%q?%q: accepted as tenant %q id %d", id, query, tenant, n)
		}
	})
}

// Every seed goes through the real API against a real ledger: none is
// answered with a 500, and what its decoder accepts is written or read.
func TestSeedsNeverAnswer500(t *testing.T) {
	b := setup(t)
	// A seed may schedule in local time without a zone, taking the
	// recipient's contact's, which only the ledger can read: x has one.
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_contacts (tenant_id, recipient, channel, address, time_zone)
			VALUES ('acme', 'x', 'sms', '+15550001', 'America/New_York')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	check := func(what, input string, r response, accepted bool, ok ...int) {
		t.Helper()
		if r.status >= 500 {
			t.Errorf("%s %q: status %d: %s", what, input, r.status, r.body)
			return
		}
		if !accepted {
			return
		}
		for _, s := range ok {
			if r.status == s {
				return
			}
		}
		t.Errorf("%s %q: decoder accepted it, API answered %d (want %v): %s", what, input, r.status, ok, r.body)
	}
	post := func(path, body string) response {
		if body == "" {
			// An empty body is sent as one, with its content type.
			return b.do(t, http.MethodPost, path, b.acme, []byte{})
		}
		return b.do(t, http.MethodPost, path, b.acme, body)
	}
	for _, s := range scheduleSeeds {
		_, _, e := decodeSchedule([]byte(s), acmeToken, MaxExpandedBytesDefault)
		check("schedule", s, post("/v1/notifications", s), e == nil, http.StatusOK)
	}
	for _, s := range eventSeeds {
		_, _, e := decodeEvent([]byte(s), acmeToken, MaxExpandedBytesDefault)
		check("event", s, post("/v1/events", s), e == nil, http.StatusOK)
	}
	for _, s := range subjectSeeds {
		_, _, e := decodeSubject([]byte(s), acmeToken)
		check("cancel", s, post("/v1/notifications/cancel", s), e == nil, http.StatusOK)
	}
	for _, s := range rescheduleSeeds {
		_, _, e := decodeReschedule([]byte(s), acmeToken, b.clk.Now())
		check("reschedule", s, post("/v1/notifications/reschedule", s), e == nil, http.StatusOK, http.StatusConflict)
	}
	for _, s := range findSeeds {
		q, err := url.ParseQuery(s)
		if err != nil {
			t.Fatalf("seed %q: %v", s, err)
		}
		_, e := decodeFind(q, acmeToken)
		check("find", s, b.do(t, http.MethodGet, "/v1/notifications?"+s, b.acme, nil), e == nil, http.StatusOK)
	}
	for _, s := range getSeeds {
		q, _ := url.ParseQuery(s[1])
		_, _, e := decodeGet(s[0], q, acmeToken)
		path := fmt.Sprintf("/v1/notifications/%s?%s", url.PathEscape(s[0]), s[1])
		check("get", s[0]+"?"+s[1], b.do(t, http.MethodGet, path, b.acme, nil), e == nil, http.StatusOK, http.StatusNotFound)
	}
}
