package telegram

import (
	"context"
	"fmt"
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

// tgError is the Bot API's error envelope
// (https://core.telegram.org/bots/api#making-requests).
func tgError(code int, description string) string {
	return fmt.Sprintf(`{"ok":false,"error_code":%d,"description":%q}`, code, description)
}

// failures is Telegram's table in docs/providers.md "Failure classes".
var failures = []providertest.Row{
	{Status: 401, Code: "401", Meaning: "Unauthorized: the bot token was revoked", Body: tgError(401, "Unauthorized"), Class: provider.Account},
	{Status: 404, Code: "404", Meaning: "Not Found: the token names no bot", Body: tgError(404, "Not Found"), Class: provider.Account},
	{Status: 429, Code: "429", Meaning: "Too Many Requests: parameters.retry_after (the chat's limit, 1/s)",
		Body:  `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 35","parameters":{"retry_after":35}}`,
		Class: provider.RateLimited, Recipient: true, After: 35 * time.Second},
	{Status: 403, Code: "403", Meaning: "Forbidden: bot was blocked by the user", Body: tgError(403, "Forbidden: bot was blocked by the user"),
		Class: provider.Permanent, Recipient: true},
	{Status: 403, Code: "403", Meaning: "Forbidden: user is deactivated, bot was kicked…", Body: tgError(403, "Forbidden: user is deactivated"),
		Class: provider.Permanent, Recipient: true},
	{Status: 400, Code: "400", Meaning: "Bad Request: chat not found", Body: tgError(400, "Bad Request: chat not found"),
		Class: provider.Permanent, Recipient: true},
	{Status: 400, Code: "400", Meaning: "Bad Request: group chat was upgraded to a supergroup chat",
		Body:  `{"ok":false,"error_code":400,"description":"Bad Request: group chat was upgraded to a supergroup chat","parameters":{"migrate_to_chat_id":-1001234}}`,
		Class: provider.Permanent, Recipient: true},
	{Status: 400, Code: "400", Meaning: "Bad Request: can't parse entities, message is too long…",
		Body: tgError(400, "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 0"), Class: provider.Permanent},
	{Status: 500, Code: "500", Meaning: "Internal Server Error", Body: tgError(500, "Internal Server Error"), Class: provider.Transient, MaybeSent: true},
	{Status: 502, Meaning: "Bad Gateway, body not the envelope", Body: `<html>Bad Gateway</html>`, Class: provider.Transient, MaybeSent: true},
	{Status: 200, Meaning: "a 200 that is not ok:true, or broke off", Body: `{"ok":false}`, Class: provider.Transient, MaybeSent: true},
}

func TestFailures(t *testing.T) {
	t.Parallel()
	srv := fake(t)
	c := client(t, srv.URL)
	providertest.CheckRows(t, srv, c, delivery(), token, failures)
	providertest.CheckRows(t, srv, c, delivery(), token, []providertest.Row{
		{Status: 400, Code: "400", Body: tgError(400, "bad bot "+token), Class: provider.Permanent},
		{Status: 200, Body: `{"ok":true,"result":{"message_id":9`, Cut: true, Class: provider.Transient, MaybeSent: true},
		{Status: 200, Body: `<html>`, Class: provider.Transient, MaybeSent: true},
	})
}

func TestFailuresDocumented(t *testing.T) {
	t.Parallel()
	providertest.CheckDocTable(t, "telegram", failures)
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
	for _, r := range failures {
		f.Add(r.Status, []byte(r.Body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		res, err := classify(provider.Response{Status: status, Header: http.Header{}, Body: body}, "1", time.Now(), token)
		providertest.CheckOutcome(t, status, providertest.Only200, res, err, token)
	})
}
