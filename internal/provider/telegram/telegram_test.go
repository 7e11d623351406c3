package telegram

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/providertest"
)

const token = "123456:ABC-secret-token"

func delivery() provider.Delivery {
	return provider.Delivery{Tenant: "t1", NotificationID: 7, Recipient: "-100123", Channel: payload.ChannelTelegram,
		Kind: "standup", IdempotencyKey: "k7",
		Content: payload.Content{Text: "*standup* in 10 minutes", Extras: map[string]string{"parse_mode": "MarkdownV2"}}}
}

// fake answers like the Bot API, after checking that the request is
// delivery() sent to the bot's sendMessage.
func fake(t *testing.T) *providertest.Server {
	return providertest.NewServer(t, "/bot"+token+"/sendMessage", func(t testing.TB, r *providertest.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("content type %q", ct)
		}
		var req map[string]string
		r.JSON(t, &req)
		if req["chat_id"] != "-100123" || req["text"] != "*standup* in 10 minutes" || req["parse_mode"] != "MarkdownV2" {
			t.Errorf("body %v", req)
		}
	})
}

func client(t *testing.T, base string) *Client {
	t.Helper()
	return providertest.New(t, New, Config{Token: token, BaseURL: base})
}

func TestSend(t *testing.T) {
	t.Parallel()
	srv := fake(t)
	srv.Reply(200, `{"ok":true,"result":{"message_id":991,"chat":{"id":-100123},"text":"x"}}`, nil)
	providertest.Accept(t, client(t, srv.URL), delivery(), "-100123:991", 200)
}

func TestClassification(t *testing.T) {
	t.Parallel()
	srv := fake(t)
	providertest.CheckClasses(t, srv, client(t, srv.URL), delivery(), token, []providertest.Case{
		{Name: "flood", Status: 429, Body: `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 35","parameters":{"retry_after":35}}`,
			Class: provider.RateLimited, After: 35 * time.Second, Code: "429"},
		{Name: "blocked", Status: 403, Body: `{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user"}`,
			Class: provider.Permanent, Code: "403"},
		{Name: "deactivated", Status: 403, Body: `{"ok":false,"error_code":403,"description":"Forbidden: user is deactivated"}`,
			Class: provider.Permanent, Code: "403"},
		{Name: "bad chat", Status: 400, Body: `{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}`,
			Class: provider.Permanent, Code: "400"},
		{Name: "bad token", Status: 401, Body: `{"ok":false,"error_code":401,"description":"Unauthorized"}`, Class: provider.Permanent, Code: "401"},
		{Name: "gateway", Status: 502, Body: `<html>Bad Gateway</html>`, Class: provider.Transient},
		{Name: "internal", Status: 500, Body: `{"ok":false,"error_code":500,"description":"Internal Server Error"}`,
			Class: provider.Transient, Code: "500"},
		{Name: "ok false on 200", Status: 200, Body: `{"ok":false}`, Class: provider.Transient},
		{Name: "echoed token", Status: 400, Body: `{"ok":false,"error_code":400,"description":"bad bot ` + token + `"}`,
			Class: provider.Permanent, Code: "400"},
	})
}

func TestTransportErrorHidesToken(t *testing.T) {
	t.Parallel()
	// The server never answers: it reads the request (so that the client
	// closing the connection cancels r.Context) and waits for the client to
	// give up.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer srv.Close()
	c := providertest.New(t, New, Config{Token: token, BaseURL: srv.URL, Timeout: 20 * time.Millisecond})
	_, err := c.Send(context.Background(), delivery())
	if !provider.IsTransient(err) {
		t.Fatalf("timeout: %v", err)
	}
	if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "/bot") {
		t.Fatalf("error leaks the URL: %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	providertest.CheckConfigErrors(t, New, []providertest.ConfigCase[Config]{
		{Config: Config{}, Want: "OWED_TELEGRAM_TOKEN"},
		{Config: Config{Token: "a/b"}, Want: "OWED_TELEGRAM_TOKEN"},
		{Config: Config{Token: "t", BaseURL: "api.telegram.org"}, Want: "OWED_TELEGRAM_BASE_URL"},
	})
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
		providertest.CheckOutcome(t, status, providertest.Only200, res, err, token)
	})
}
