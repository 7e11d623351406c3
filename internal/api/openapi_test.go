package api

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/api/openapitest"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/service"
)

// contract checks every exchange the tests make through bundle.do.
var contract *openapitest.Spec

// TestMain loads the contract and, after a run of the whole package, fails
// when a documented route × status × error code was never produced by a
// validated exchange: the document cannot promise what no test shows.
func TestMain(m *testing.M) {
	flag.Parse()
	var err error
	if contract, err = openapitest.Load(OpenAPI()); err != nil {
		fmt.Fprintln(os.Stderr, "openapi.json:", err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.fuzz").Value.String() == "" {
		if missing := contract.Unexercised("/v1/"); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "openapi.json documents outcomes no test produced:\n  %s\n", strings.Join(missing, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}

// TestEveryErrorCodeIsDocumented binds the code constants to the Error
// schema's enum.
func TestEveryErrorCodeIsDocumented(t *testing.T) {
	src, err := os.ReadFile("errors.go")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct{ Enum []string }
							}
						}
					}
				}
			}
		}
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	enum := strings.Join(doc.Components.Schemas.Error.Properties.Error.Properties.Code.Enum, " ")
	consts := regexp.MustCompile(`code\w+ += "(\w+)"`).FindAllStringSubmatch(string(src), -1)
	if len(consts) < 10 {
		t.Fatalf("found %d code constants in errors.go", len(consts))
	}
	for _, c := range consts {
		if !strings.Contains(" "+enum+" ", " "+c[1]+" ") {
			t.Errorf("code %q is not in the Error schema's enum", c[1])
		}
	}
}

func TestOpenAPIIsServedWithoutAToken(t *testing.T) {
	b := setup(t)
	r := b.do(t, "GET", "/v1/openapi.json", "", nil)
	expect(t, r, http.StatusOK)
	if !bytes.Equal(r.body, OpenAPI()) {
		t.Error("GET /v1/openapi.json is not the embedded document")
	}
}

func TestRequestID(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct{ in, want string }{
		{"abc-123", "abc-123"},
		{strings.Repeat("x", service.MaxRequestID), strings.Repeat("x", service.MaxRequestID)},
		{strings.Repeat("x", service.MaxRequestID+1), ""},
		{"has space", ""},
		{"ümlaut", ""},
		{"", ""},
	} {
		req := httptest.NewRequest("GET", "/v1/notifications?limit=1", nil)
		req.Header.Set("Authorization", "Bearer "+b.acme)
		if tc.in != "" {
			req.Header.Set(service.HeaderRequestID, tc.in)
		}
		b.logs.Reset()
		rec := httptest.NewRecorder()
		contract.Handler(t, b.handler).ServeHTTP(rec, req)
		got := rec.Header().Get(service.HeaderRequestID)
		switch {
		case tc.want != "" && got != tc.want:
			t.Errorf("incoming %q: answered %q, want it kept", tc.in, got)
		case tc.want == "" && (!regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(got)):
			t.Errorf("incoming %q: answered %q, want a generated 32-hex id", tc.in, got)
		}
		var line struct {
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(b.logs.Bytes(), &line); err != nil || line.RequestID != got {
			t.Errorf("incoming %q: log line %s does not carry request_id %q", tc.in, b.logs.Bytes(), got)
		}
	}
}

// TestServiceBodyLimitIsTheDocumentedError: the service's own limit (a
// Content-Length over 1 MiB never reaches the API) answers the API's JSON
// error, not text/plain.
func TestServiceBodyLimitIsTheDocumentedError(t *testing.T) {
	h := service.LimitBody(http.NotFoundHandler(), MaxBodyBytes)
	req := httptest.NewRequest("POST", "/v1/notifications", strings.NewReader(strings.Repeat("x", MaxBodyBytes+1)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var e struct{ Error *apiError }
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") ||
		json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error == nil || e.Error.Code != codeTooLarge {
		t.Fatalf("status %d, type %q, body %s; want 413 application/json %s", rec.Code,
			rec.Header().Get("Content-Type"), rec.Body.Bytes(), codeTooLarge)
	}
	// Refused before the API sees it, it still carries a request id: the
	// caller's when sane, else a new one.
	if rec.Header().Get(service.HeaderRequestID) == "" {
		t.Errorf("413 without %s", service.HeaderRequestID)
	}
	req.Header.Set(service.HeaderRequestID, "caller-42")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if got := rec.Header().Get(service.HeaderRequestID); got != "caller-42" {
		t.Errorf("413 %s %q, want the caller's caller-42", service.HeaderRequestID, got)
	}
}

// TestEveryRouteAnswers500WhenTheDatabaseIsGone: a ledger whose database
// cannot be reached is the documented 500 on every route that reads or
// writes, and on a tenant token's check.
func TestEveryRouteAnswers500WhenTheDatabaseIsGone(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("postgres", "postgres://owed@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := &bundle{handler: New(Options{Ledger: ledger.New(db, nil), Tokens: NewTokens(db, nil),
		ServiceToken: serviceToken, Log: zerolog.Nop()})}
	due := time.Now().Add(time.Hour)
	for _, c := range []struct {
		method, path, token string
		body                any
	}{
		{"POST", "/v1/notifications", serviceToken, map[string]any{"tenant_id": "acme",
			"notifications": []map[string]any{note("+15550001", "T-1", due)}}},
		{"GET", "/v1/notifications?tenant=acme", serviceToken, nil},
		{"GET", "/v1/notifications/1?tenant=acme", serviceToken, nil},
		{"POST", "/v1/notifications/cancel", serviceToken, map[string]any{"tenant_id": "acme", "kind": "follow_up", "ref_id": "T-1"}},
		{"POST", "/v1/notifications/reschedule", serviceToken, map[string]any{"tenant_id": "acme", "kind": "follow_up",
			"ref_id": "T-1", "delay_seconds": 60}},
		{"PATCH", "/v1/notifications/1", serviceToken, map[string]any{"tenant_id": "acme", "payload": map[string]any{"text": "hi"}}},
		{"PUT", "/v1/quiet-hours", serviceToken, map[string]any{"tenant_id": "acme", "scope": "tenant",
			"windows": []string{"mon-fri 08:00-20:00"}}},
		{"PUT", "/v1/digests", serviceToken, map[string]any{"tenant_id": "acme", "kind": "follow_up", "window": "10m"}},
		{"GET", "/v1/digests?tenant=acme", serviceToken, nil},
		{"GET", "/v1/quiet-hours?tenant=acme", serviceToken, nil},
		{"PATCH", "/v1/notifications", serviceToken, map[string]any{"tenant_id": "acme", "key": map[string]any{
			"recipient": "+15550001", "kind": "follow_up", "ref_id": "T-1", "due_at": due.Format(time.RFC3339)},
			"payload": map[string]any{"text": "hi"}}},
		{"POST", "/v1/events", serviceToken, map[string]any{"tenant_id": "acme", "kind": "shipment", "ref_id": "S-1",
			"channel": "sms", "payload": map[string]any{"text": "hi"}, "occurred_at": due.Format(time.RFC3339),
			"recipients": []map[string]any{{"recipient": "+15550001"}}}},
		{"POST", "/v1/recipients/erase", serviceToken, map[string]any{"tenant_id": "acme", "recipient": "+15550001",
			"reason": "r"}},
		{"GET", "/v1/notifications", TokenPrefix + "not-a-real-token-but-well-formed-enough", nil},
	} {
		r := b.do(t, c.method, c.path, c.token, c.body)
		if r.status != http.StatusInternalServerError || r.apiErr(t).Code != codeInternal {
			t.Errorf("%s %s: status %d body %s, want 500 internal", c.method, c.path, r.status, r.body)
		}
	}
}

// TestWriteRoutesRefuseAlike: every write route answers the documented
// refusals the same way, each validated against the contract.
func TestWriteRoutesRefuseAlike(t *testing.T) {
	b := setup(t)
	big := `{"pad": "` + strings.Repeat("x", MaxBodyBytes) + `"}`
	for _, route := range []struct{ method, path string }{{"POST", "/v1/notifications"},
		{"POST", "/v1/notifications/cancel"}, {"POST", "/v1/notifications/reschedule"}, {"POST", "/v1/events"},
		{"PATCH", "/v1/notifications/1"}, {"PATCH", "/v1/notifications"}, {"PUT", "/v1/quiet-hours"}, {"PUT", "/v1/digests"},
		{"POST", "/v1/recipients/erase"}} {
		method, path := route.method, route.path
		if r := b.do(t, method, path, "", map[string]any{}); r.status != http.StatusUnauthorized || r.apiErr(t).Code != codeUnauthorized {
			t.Errorf("%s without a token: %d %s", path, r.status, r.body)
		}
		if r := b.do(t, method, path, b.acme, big); r.status != http.StatusRequestEntityTooLarge || r.apiErr(t).Code != codeTooLarge {
			t.Errorf("%s over 1 MiB: %d %s", path, r.status, r.body)
		}
		expectField(t, b.do(t, method, path, b.acme, map[string]any{"tenant_id": "globex"}), http.StatusForbidden, "tenant_id")
		expectField(t, b.do(t, method, path, b.acme, map[string]any{"nope": 1}), http.StatusBadRequest, "nope")
		req := httptest.NewRequest(method, path, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+b.acme)
		req.Header.Set("Content-Type", "text/plain")
		rec := httptest.NewRecorder()
		contract.Handler(t, b.handler).ServeHTTP(rec, req)
		if rec.Code != http.StatusUnsupportedMediaType {
			t.Errorf("%s as text/plain: %d %s", path, rec.Code, rec.Body)
		}
	}
	if r := b.do(t, "GET", "/v1/notifications/1", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("GET one without a token: %d %s", r.status, r.body)
	}
	// A body under 1 MiB stands for rows of about its own size, so only a
	// low OWED_API_MAX_EXPANDED_BYTES shows schedule's expanded_too_large.
	small := &bundle{handler: New(Options{Ledger: b.ledger, Tokens: b.tokens, Log: zerolog.Nop(), Clock: b.clk,
		MaxExpandedBytes: 50})}
	due := b.clk.Now().Add(time.Hour)
	r := small.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", due), note("+15550002", "T-1", due)))
	if r.status != http.StatusRequestEntityTooLarge || r.apiErr(t).Code != codeExpandedTooLarge {
		t.Errorf("schedule over the expanded bound: %d %s", r.status, r.body)
	}
}
