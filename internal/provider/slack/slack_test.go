package slack

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

const token = "xoxb-secret-slack-token"

func delivery() provider.Delivery {
	return provider.Delivery{Tenant: "t1", NotificationID: 11, Recipient: "C024BE91L", Channel: message.ChannelSlack,
		Kind: "deploy", IdempotencyKey: "k11", Message: message.Message{Text: "Deploy window opens in 5 minutes"}}
}

func fake(t *testing.T, status int, body string, header map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/chat.postMessage" {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		if r.Header.Get("Authorization") != "Bearer "+token || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			t.Errorf("headers %v", r.Header)
		}
		var req request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("body: %v", err)
		}
		if req.Channel != "C024BE91L" || req.Text != "Deploy window opens in 5 minutes" {
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
	c, err := New(Config{Token: token, BaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSend(t *testing.T) {
	t.Parallel()
	srv := fake(t, 200, `{"ok":true,"channel":"C024BE91L","ts":"1503435956.000247","message":{"text":"x"}}`, nil)
	res, err := client(t, srv.URL).Send(context.Background(), delivery())
	if err != nil || res.MessageID != "C024BE91L:1503435956.000247" {
		t.Fatalf("%+v %v", res, err)
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
		{"http 429", 429, ``, "30", provider.RateLimited, 30 * time.Second, ""},
		{"ratelimited body", 200, `{"ok":false,"error":"ratelimited"}`, "3", provider.RateLimited, 3 * time.Second, "ratelimited"},
		{"channel_not_found", 200, `{"ok":false,"error":"channel_not_found"}`, "", provider.Permanent, 0, "channel_not_found"},
		{"not_in_channel", 200, `{"ok":false,"error":"not_in_channel"}`, "", provider.Permanent, 0, "not_in_channel"},
		{"is_archived", 200, `{"ok":false,"error":"is_archived"}`, "", provider.Permanent, 0, "is_archived"},
		{"invalid_auth", 200, `{"ok":false,"error":"invalid_auth"}`, "", provider.Permanent, 0, "invalid_auth"},
		{"account_inactive", 200, `{"ok":false,"error":"account_inactive"}`, "", provider.Permanent, 0, "account_inactive"},
		{"internal_error", 200, `{"ok":false,"error":"internal_error"}`, "", provider.Transient, 0, "internal_error"},
		{"fatal_error", 200, `{"ok":false,"error":"fatal_error"}`, "", provider.Transient, 0, "fatal_error"},
		{"echoed token", 200, `{"ok":false,"error":"` + token + `"}`, "", provider.Transient, 0, "[redacted]"},
		{"5xx", 503, `{"ok":false,"error":"service_unavailable"}`, "", provider.Transient, 0, "service_unavailable"},
		{"html 200", 200, `<html>`, "", provider.Transient, 0, ""},
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
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "OWED_SLACK_TOKEN") {
		t.Errorf("missing token: %v", err)
	}
	if _, err := New(Config{Token: token, BaseURL: "slack.com"}); err == nil || !strings.Contains(err.Error(), "OWED_SLACK_BASE_URL") {
		t.Errorf("bad base: %v", err)
	}
}

// FuzzSlackResponse: the classifier must never panic, never accept a
// non-200 or ok:false, and never leak the token.
func FuzzSlackResponse(f *testing.F) {
	f.Add(200, []byte(`{"ok":true,"channel":"C1","ts":"1.2"}`), "")
	f.Add(200, []byte(`{"ok":false,"error":"ratelimited"}`), "Mon, 02 Jan 2006 15:04:05 GMT")
	f.Add(429, []byte(``), "99999999999999999999")
	f.Add(200, []byte(`{"ok":true}`), "")
	f.Fuzz(func(t *testing.T, status int, body []byte, retryAfter string) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		res, err := classify(provider.Response{Status: status, Header: h, Body: body}, time.Now(), token)
		if err == nil && (status != 200 || res.HTTPStatus != status) {
			t.Fatalf("accepted status %d", status)
		}
		if err != nil {
			pe := provider.Classify(err)
			if pe.RetryAfter < 0 || pe.RetryAfter > provider.MaxRetryAfter || strings.Contains(err.Error(), token) {
				t.Fatalf("bad error: %v", err)
			}
		}
	})
}
