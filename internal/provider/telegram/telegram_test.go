package telegram

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

const token = "123456:ABC-secret-token"

func delivery() provider.Delivery {
	return provider.Delivery{Tenant: "t1", NotificationID: 7, Recipient: "-100123", Channel: message.ChannelTelegram,
		Kind: "standup", IdempotencyKey: "k7",
		Message: message.Message{Text: "*standup* in 10 minutes", Extras: map[string]string{"parse_mode": "MarkdownV2"}}}
}

// fake answers like the Bot API: status and body as given, after checking
// the request's shape.
func fake(t *testing.T, status int, body string, header map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/bot"+token+"/sendMessage" {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("content type %q", ct)
		}
		var req map[string]string
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("body: %v", err)
		}
		if req["chat_id"] != "-100123" || req["text"] != "*standup* in 10 minutes" || req["parse_mode"] != "MarkdownV2" {
			t.Errorf("body %v", req)
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
	srv := fake(t, 200, `{"ok":true,"result":{"message_id":991,"chat":{"id":-100123},"text":"x"}}`, nil)
	res, err := client(t, srv.URL).Send(context.Background(), delivery())
	if err != nil {
		t.Fatal(err)
	}
	if res.MessageID != "-100123:991" || res.HTTPStatus != 200 {
		t.Fatalf("result %+v", res)
	}
}

func TestClassification(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		body   string
		class  provider.Class
		after  time.Duration
		code   string
	}{
		{"flood", 429, `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 35","parameters":{"retry_after":35}}`, provider.RateLimited, 35 * time.Second, "429"},
		{"blocked", 403, `{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user"}`, provider.Permanent, 0, "403"},
		{"deactivated", 403, `{"ok":false,"error_code":403,"description":"Forbidden: user is deactivated"}`, provider.Permanent, 0, "403"},
		{"bad chat", 400, `{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}`, provider.Permanent, 0, "400"},
		{"bad token", 401, `{"ok":false,"error_code":401,"description":"Unauthorized"}`, provider.Permanent, 0, "401"},
		{"gateway", 502, `<html>Bad Gateway</html>`, provider.Transient, 0, ""},
		{"internal", 500, `{"ok":false,"error_code":500,"description":"Internal Server Error"}`, provider.Transient, 0, "500"},
		{"ok false on 200", 200, `{"ok":false}`, provider.Transient, 0, ""},
		{"echoed token", 400, `{"ok":false,"error_code":400,"description":"bad bot ` + token + `"}`, provider.Permanent, 0, "400"},
	} {
		srv := fake(t, tt.status, tt.body, nil)
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

func TestTransportErrorHidesToken(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Millisecond)
	}))
	defer srv.Close()
	c, err := New(Config{Token: token, BaseURL: srv.URL, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(context.Background(), delivery())
	if !provider.IsTransient(err) {
		t.Fatalf("timeout: %v", err)
	}
	if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "/bot") {
		t.Fatalf("error leaks the URL: %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "OWED_TELEGRAM_TOKEN"},
		{Config{Token: "a/b"}, "OWED_TELEGRAM_TOKEN"},
		{Config{Token: "t", BaseURL: "api.telegram.org"}, "OWED_TELEGRAM_BASE_URL"},
	} {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v", tt.cfg, err)
		}
	}
	c, err := New(Config{Token: "t"})
	if err != nil || !strings.HasPrefix(c.ep.URL(), DefaultBaseURL+"/bott/") {
		t.Fatalf("default base: %v %v", c, err)
	}
}

// FuzzTelegramResponse feeds arbitrary statuses and bodies to the
// classifier: it must never panic, never accept a non-200, never leak the
// token, and keep RetryAfter within bounds.
func FuzzTelegramResponse(f *testing.F) {
	f.Add(200, []byte(`{"ok":true,"result":{"message_id":1}}`))
	f.Add(429, []byte(`{"ok":false,"error_code":429,"parameters":{"retry_after":9223372036854775807}}`))
	f.Add(429, []byte(`{"ok":false,"error_code":429,"parameters":{"retry_after":-5}}`))
	f.Add(403, []byte(`{"ok":false,"description":"`+token+`"}`))
	f.Add(500, []byte(`not json`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		res, err := classify(provider.Response{Status: status, Header: http.Header{}, Body: body}, "1", time.Now(), token)
		if err == nil && (status != 200 || res.HTTPStatus != status) {
			t.Fatalf("accepted status %d with id %q", status, res.MessageID)
		}
		if err != nil {
			pe := provider.Classify(err)
			if pe.RetryAfter < 0 || pe.RetryAfter > provider.MaxRetryAfter {
				t.Fatalf("retry after %v", pe.RetryAfter)
			}
			if strings.Contains(err.Error(), token) {
				t.Fatalf("token leaked: %v", err)
			}
		}
	})
}
