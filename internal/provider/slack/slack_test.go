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

// failed is chat.postMessage's documented failure: HTTP 200 carrying
// ok:false and the error (https://docs.slack.dev/reference/methods/chat.postMessage).
func failed(slackError string, class provider.Class, recipient, maybeSent bool, meaning string) providertest.Row {
	return providertest.Row{Status: 200, Code: slackError, Meaning: meaning, Body: `{"ok":false,"error":"` + slackError + `"}`,
		Class: class, Recipient: recipient, MaybeSent: maybeSent}
}

// failures is Slack's table in docs/providers.md "Failure classes".
var failures = []providertest.Row{
	failed("invalid_auth", provider.Account, false, false, "the token is invalid"),
	failed("not_authed", provider.Account, false, false, "no token"),
	failed("token_revoked", provider.Account, false, false, "the token was revoked"),
	failed("token_expired", provider.Account, false, false, "the token expired"),
	failed("account_inactive", provider.Account, false, false, "the bot user or workspace was deleted"),
	failed("missing_scope", provider.Account, false, false, "the token lacks chat:write"),
	failed("no_permission", provider.Account, false, false, "the workspace token lacks a permission"),
	failed("not_allowed_token_type", provider.Account, false, false, "not a bot token"),
	failed("ekm_access_denied", provider.Account, false, false, "administrators suspended posting"),
	failed("team_access_not_granted", provider.Account, false, false, "the token has no access to the workspace"),
	failed("channel_not_found", provider.Permanent, true, false, "the channel id is invalid"),
	failed("not_in_channel", provider.Permanent, true, false, "the bot is not in the channel"),
	failed("is_archived", provider.Permanent, true, false, "the channel is archived"),
	failed("restricted_action", provider.Permanent, true, false, "a workspace preference bars posting there"),
	failed("restricted_action_read_only_channel", provider.Permanent, true, false, "the channel is read-only"),
	failed("msg_too_long", provider.Permanent, false, false, "the text is too long"),
	failed("no_text", provider.Permanent, false, false, "no text"),
	failed("invalid_blocks", provider.Permanent, false, false, "the blocks are invalid"),
	failed("invalid_blocks_format", provider.Permanent, false, false, "the blocks are malformed"),
	failed("too_many_attachments", provider.Permanent, false, false, "too many attachments"),
	failed("invalid_arguments", provider.Permanent, false, false, "invalid arguments"),
	failed("invalid_charset", provider.Permanent, false, false, "invalid charset"),
	{Status: 200, Code: "rate_limited", Meaning: "posting too fast to the channel: Retry-After", Body: `{"ok":false,"error":"rate_limited"}`,
		Header: providertest.RetryAfter("3"), Class: provider.RateLimited, Recipient: true, After: 3 * time.Second},
	{Status: 200, Code: "ratelimited", Meaning: "the older spelling", Body: `{"ok":false,"error":"ratelimited"}`, Class: provider.RateLimited, Recipient: true},
	{Status: 429, Meaning: "over the channel's 1/s: Retry-After", Header: providertest.RetryAfter("30"), Class: provider.RateLimited, Recipient: true, After: 30 * time.Second},
	failed("internal_error", provider.Transient, false, true, "Slack failed; part may have succeeded"),
	failed("fatal_error", provider.Transient, false, true, "Slack failed; part may have succeeded"),
	failed("service_unavailable", provider.Transient, false, false, "any other error: Slack answered, nothing posted"),
	{Status: 503, Code: "service_unavailable", Meaning: "5xx", Body: `{"ok":false,"error":"service_unavailable"}`, Class: provider.Transient, MaybeSent: true},
	{Status: 200, Meaning: "a 200 that is not the documented JSON, or broke off", Body: `<html>`, Class: provider.Transient, MaybeSent: true},
}

func TestFailures(t *testing.T) {
	t.Parallel()
	srv := fake(t)
	c := client(t, srv.URL)
	providertest.CheckRows(t, srv, c, delivery(), token, failures)
	providertest.CheckRows(t, srv, c, delivery(), token, []providertest.Row{
		{Status: 200, Code: "[redacted]", Body: `{"ok":false,"error":"` + token + `"}`, Class: provider.Transient},
		{Status: 200, Body: `{"ok":true,"channel":"C024BE91L","ts":"15`, Cut: true, Class: provider.Transient, MaybeSent: true},
	})
}

func TestFailuresDocumented(t *testing.T) {
	t.Parallel()
	providertest.CheckDocTable(t, "slack", failures)
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
	for _, r := range failures {
		f.Add(r.Status, []byte(r.Body), r.Header["Retry-After"])
	}
	f.Fuzz(func(t *testing.T, status int, body []byte, retryAfter string) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		res, err := classify(provider.Response{Status: status, Header: h, Body: body}, time.Now(), token)
		providertest.CheckOutcome(t, status, providertest.Only200, res, err, token)
	})
}
