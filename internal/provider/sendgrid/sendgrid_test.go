package sendgrid

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/message"
	"github.com/owedhq/owed/internal/provider"
)

const key = "SG.secret-api-key"

func delivery() provider.Delivery {
	return provider.Delivery{Tenant: "t1", NotificationID: 9, Recipient: "ann@example.com", Channel: message.ChannelEmail,
		Kind: "invoice", IdempotencyKey: "k9",
		Message: message.Message{Subject: "Invoice due", Text: "Pay it", HTML: "<p>Pay it</p>"}}
}

func fake(t *testing.T, status int, body string, header map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v3/mail/send" {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		if r.Header.Get("Authorization") != "Bearer "+key || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("headers %v", r.Header)
		}
		var req request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("body: %v", err)
		}
		p := req.Personalizations
		if len(p) != 1 || len(p[0].To) != 1 || p[0].To[0].Email != "ann@example.com" ||
			p[0].CustomArgs["owed_idempotency_key"] != "k9" || req.From.Email != "owed@example.com" ||
			req.Subject != "Invoice due" || len(req.Content) != 2 ||
			req.Content[0].Type != "text/plain" || req.Content[1].Type != "text/html" {
			t.Errorf("body %+v", req)
		}
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func client(t *testing.T, base string) *Client {
	t.Helper()
	c, err := New(Config{APIKey: key, From: "owed@example.com", BaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSend(t *testing.T) {
	t.Parallel()
	srv := fake(t, 202, "", map[string]string{"X-Message-Id": "sg-abc"})
	res, err := client(t, srv.URL).Send(context.Background(), delivery())
	if err != nil || res.MessageID != "sg-abc" || res.HTTPStatus != 202 {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestClassification(t *testing.T) {
	t.Parallel()
	reset := strconv.FormatInt(time.Now().Add(90*time.Second).Unix(), 10)
	for _, tt := range []struct {
		name   string
		status int
		body   string
		header map[string]string
		class  provider.Class
		min    time.Duration
		max    time.Duration
	}{
		{"rate limited", 429, `{"errors":[{"message":"too many requests"}]}`, map[string]string{"X-RateLimit-Reset": reset}, provider.RateLimited, 88 * time.Second, 90 * time.Second},
		{"rate limited, retry-after", 429, ``, map[string]string{"Retry-After": "7"}, provider.RateLimited, 7 * time.Second, 7 * time.Second},
		{"bad request", 400, `{"errors":[{"message":"Does not contain a valid address.","field":"personalizations.0.to.0.email"}]}`, nil, provider.Permanent, 0, 0},
		{"unauthorized", 401, `{"errors":[{"message":"The provided authorization grant is invalid, expired, or revoked"}]}`, nil, provider.Permanent, 0, 0},
		{"forbidden", 403, `{"errors":[{"message":"access forbidden ` + key + `"}]}`, nil, provider.Permanent, 0, 0},
		{"payload too large", 413, ``, nil, provider.Permanent, 0, 0},
		{"server", 500, `{"errors":[{"message":"internal"}]}`, nil, provider.Transient, 0, 0},
		{"unavailable", 503, ``, map[string]string{"Retry-After": "3"}, provider.Transient, 3 * time.Second, 3 * time.Second},
	} {
		srv := fake(t, tt.status, tt.body, tt.header)
		_, err := client(t, srv.URL).Send(context.Background(), delivery())
		pe := provider.Classify(err)
		if pe == nil || pe.Class != tt.class || pe.RetryAfter < tt.min || pe.RetryAfter > tt.max || pe.HTTPStatus != tt.status {
			t.Errorf("%s: %#v", tt.name, pe)
			continue
		}
		if strings.Contains(err.Error(), key) {
			t.Errorf("%s: error leaks the key: %v", tt.name, err)
		}
	}
}

func TestUntilReset(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 500_000_000)
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1010", 9500 * time.Millisecond, true},
		{"900", 0, true},
		{"99999999999", provider.MaxRetryAfter, true},
		{"-1", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	} {
		if got, ok := untilReset(tt.in, now); got != tt.want || ok != tt.ok {
			t.Errorf("untilReset(%q) = %v %v", tt.in, got, ok)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "OWED_SENDGRID_API_KEY"},
		{Config{APIKey: key}, "OWED_SENDGRID_FROM"},
		{Config{APIKey: key, From: "a@b", BaseURL: "http://x/?k=1"}, "OWED_SENDGRID_BASE_URL"},
	} {
		_, err := New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), key) {
			t.Errorf("%+v: %v", tt.cfg, err)
		}
	}
}

// FuzzSendGridResponse: the classifier must never panic, never accept a
// non-2xx, keep RetryAfter in bounds and never leak the key.
func FuzzSendGridResponse(f *testing.F) {
	f.Add(202, []byte(""), "")
	f.Add(429, []byte(`{"errors":[{"message":"x"}]}`), "9223372036854775807")
	f.Add(429, []byte(`{"errors":[]}`), "-9223372036854775808")
	f.Add(400, []byte(`{"errors":[{"field":null}]}`), "")
	f.Fuzz(func(t *testing.T, status int, body []byte, reset string) {
		h := http.Header{}
		h.Set("X-RateLimit-Reset", reset)
		res, err := classify("sendgrid", provider.Response{Status: status, Header: h, Body: body}, time.Now(), key)
		if err == nil && (status < 200 || status > 299 || res.HTTPStatus != status) {
			t.Fatalf("accepted status %d", status)
		}
		if err != nil {
			pe := provider.Classify(err)
			if pe.RetryAfter < 0 || pe.RetryAfter > provider.MaxRetryAfter || strings.Contains(err.Error(), key) {
				t.Fatalf("bad error: %v", err)
			}
		}
	})
}
