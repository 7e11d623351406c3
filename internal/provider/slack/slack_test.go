package slack

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/providertest"
)

const token = "xoxb-secret-slack-token"

func delivery() provider.Delivery {
	return provider.Delivery{Tenant: "t1", NotificationID: 11, Recipient: "C024BE91L", Channel: payload.ChannelSlack,
		Kind: "deploy", IdempotencyKey: "k11", Content: payload.Content{Text: "Deploy window opens in 5 minutes"}}
}

// fake answers like chat.postMessage, after checking that the request is
// delivery() sent with the bot token.
func fake(t *testing.T) *providertest.Server {
	return providertest.NewServer(t, "/api/chat.postMessage", func(t testing.TB, r *providertest.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			t.Errorf("headers %v", r.Header)
		}
		var req request
		r.JSON(t, &req)
		if req.Channel != "C024BE91L" || req.Text != "Deploy window opens in 5 minutes" {
			t.Errorf("body %+v", req)
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
	srv.Reply(200, `{"ok":true,"channel":"C024BE91L","ts":"1503435956.000247","message":{"text":"x"}}`, nil)
	providertest.Accept(t, client(t, srv.URL), delivery(), "C024BE91L:1503435956.000247", 200)
}

func TestClassification(t *testing.T) {
	t.Parallel()
	// failed is an HTTP 200 carrying ok:false and slackError.
	failed := func(name, slackError, retryAfter string, class provider.Class, after time.Duration) providertest.Case {
		return providertest.Case{Name: name, Status: 200, Body: `{"ok":false,"error":"` + slackError + `"}`,
			Header: providertest.RetryAfter(retryAfter), Class: class, After: after, Code: slackError}
	}
	srv := fake(t)
	providertest.CheckClasses(t, srv, client(t, srv.URL), delivery(), token, []providertest.Case{
		{Name: "http 429", Status: 429, Header: providertest.RetryAfter("30"), Class: provider.RateLimited, After: 30 * time.Second},
		failed("ratelimited body", "ratelimited", "3", provider.RateLimited, 3*time.Second),
		failed("channel_not_found", "channel_not_found", "", provider.Permanent, 0),
		failed("not_in_channel", "not_in_channel", "", provider.Permanent, 0),
		failed("is_archived", "is_archived", "", provider.Permanent, 0),
		failed("invalid_auth", "invalid_auth", "", provider.Permanent, 0),
		failed("account_inactive", "account_inactive", "", provider.Permanent, 0),
		failed("internal_error", "internal_error", "", provider.Transient, 0),
		failed("fatal_error", "fatal_error", "", provider.Transient, 0),
		{Name: "echoed token", Status: 200, Body: `{"ok":false,"error":"` + token + `"}`, Class: provider.Transient, Code: "[redacted]"},
		{Name: "5xx", Status: 503, Body: `{"ok":false,"error":"service_unavailable"}`, Class: provider.Transient, Code: "service_unavailable"},
		{Name: "html 200", Status: 200, Body: `<html>`, Class: provider.Transient},
	})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	providertest.CheckConfigErrors(t, New, []providertest.ConfigCase[Config]{
		{Config: Config{}, Want: "OWED_SLACK_TOKEN"},
		{Config: Config{Token: token, BaseURL: "slack.com"}, Want: "OWED_SLACK_BASE_URL"},
	}, token)
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
		providertest.CheckOutcome(t, status, providertest.Only200, res, err, token)
	})
}
