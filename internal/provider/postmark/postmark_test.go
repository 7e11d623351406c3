package postmark

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/message"
	"github.com/owedhq/owed/internal/provider"
)

const token = "pm-server-token-secret"

func delivery() provider.Delivery {
	return provider.Delivery{Tenant: "t1", NotificationID: 5, Recipient: "bob@example.com", Channel: message.ChannelEmail,
		Kind: "renewal", IdempotencyKey: "k5",
		Message: message.Message{Subject: "Renewal", Text: "Renew soon", HTML: "<b>Renew</b>"}}
}

func fake(t *testing.T, status int, body string, header map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/email" {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		if r.Header.Get("X-Postmark-Server-Token") != token || r.Header.Get("Accept") != "application/json" ||
			r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("headers %v", r.Header)
		}
		var req request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("body: %v", err)
		}
		if req.From != "owed@example.com" || req.To != "bob@example.com" || req.Subject != "Renewal" ||
			req.TextBody != "Renew soon" || req.HTMLBody != "<b>Renew</b>" || req.MessageStream != "outbound" ||
			req.Metadata["owed_idempotency_key"] != "k5" {
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
	c, err := New(Config{ServerToken: token, From: "owed@example.com", BaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSend(t *testing.T) {
	t.Parallel()
	srv := fake(t, 200, `{"To":"bob@example.com","SubmittedAt":"2026-03-01T12:00:00Z","MessageID":"b7bc2f4a-e38e","ErrorCode":0,"Message":"OK"}`, nil)
	res, err := client(t, srv.URL).Send(context.Background(), delivery())
	if err != nil || res.MessageID != "b7bc2f4a-e38e" {
		t.Fatalf("%+v %v", res, err)
	}
	// Postmark fails with 4xx, so a 200 without a MessageID is still a send.
	srv = fake(t, 200, `{"ErrorCode":0}`, nil)
	if res, err = client(t, srv.URL).Send(context.Background(), delivery()); err != nil || res.MessageID != "" {
		t.Fatalf("200 without an id: %+v %v", res, err)
	}
}

func TestClassification(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		body   string
		ra     string
		class  provider.Class
		after  time.Duration
		code   string
	}{
		{"inactive", 422, `{"ErrorCode":406,"Message":"You tried to send to recipient(s) that have been marked as inactive."}`, "", provider.Permanent, 0, "406"},
		{"invalid email", 422, `{"ErrorCode":300,"Message":"Invalid 'To' address"}`, "", provider.Permanent, 0, "300"},
		{"bad token", 401, `{"ErrorCode":10,"Message":"Bad or missing API token ` + token + `"}`, "", provider.Permanent, 0, "10"},
		{"other 422", 422, `{"ErrorCode":412,"Message":"Account pending approval"}`, "", provider.Permanent, 0, "412"},
		{"rate limited", 429, `{"ErrorCode":429,"Message":"Rate limit exceeded"}`, "20", provider.RateLimited, 20 * time.Second, "429"},
		{"server", 500, `{"ErrorCode":0,"Message":"Internal Server Error"}`, "", provider.Transient, 0, ""},
		{"unavailable", 503, ``, "5", provider.Transient, 5 * time.Second, ""},
	} {
		srv := fake(t, tt.status, tt.body, map[string]string{"Retry-After": tt.ra})
		_, err := client(t, srv.URL).Send(context.Background(), delivery())
		pe := provider.Classify(err)
		if pe == nil || pe.Class != tt.class || pe.RetryAfter != tt.after || pe.Code != tt.code || pe.HTTPStatus != tt.status {
			t.Errorf("%s: %#v", tt.name, pe)
			continue
		}
		if strings.Contains(err.Error(), token) {
			t.Errorf("%s: error leaks the token: %v", tt.name, err)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "OWED_POSTMARK_SERVER_TOKEN"},
		{Config{ServerToken: token}, "OWED_POSTMARK_FROM"},
		{Config{ServerToken: token, From: "a@b", BaseURL: "http://u:p@x"}, "OWED_POSTMARK_BASE_URL"},
	} {
		_, err := New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), token) {
			t.Errorf("%+v: %v", tt.cfg, err)
		}
	}
}

// FuzzPostmarkResponse: the classifier must never panic, never accept a
// non-2xx or a body with an ErrorCode, and never leak the token.
func FuzzPostmarkResponse(f *testing.F) {
	f.Add(200, []byte(`{"MessageID":"x","ErrorCode":0}`))
	f.Add(422, []byte(`{"ErrorCode":406,"Message":"inactive"}`))
	f.Add(200, []byte(`{"MessageID":"x","ErrorCode":300}`))
	f.Add(429, []byte(`{"ErrorCode":"429"}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		res, err := classify("postmark", provider.Response{Status: status, Header: http.Header{}, Body: body}, time.Now(), token)
		if err == nil && (status < 200 || status > 299 || res.HTTPStatus != status) {
			t.Fatalf("accepted status %d", status)
		}
		if err != nil && strings.Contains(err.Error(), token) {
			t.Fatalf("token leaked: %v", err)
		}
	})
}
