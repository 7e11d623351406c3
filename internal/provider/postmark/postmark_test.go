package postmark

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/providertest"
)

const token = "pm-server-token-secret"

func delivery() provider.Delivery {
	return provider.Delivery{Tenant: "t1", NotificationID: 5, Recipient: "bob@example.com", Channel: payload.ChannelEmail,
		Kind: "renewal", IdempotencyKey: "k5",
		Content: payload.Content{Subject: "Renewal", Text: "Renew soon", HTML: "<b>Renew</b>"}}
}

// fake answers like Postmark's /email, after checking that the request is
// delivery() sent with the server token.
func fake(t *testing.T) *providertest.Server {
	return providertest.NewServer(t, "/email", func(t testing.TB, r *providertest.Request) {
		if r.Header.Get("X-Postmark-Server-Token") != token || r.Header.Get("Accept") != "application/json" ||
			r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("headers %v", r.Header)
		}
		var req request
		r.JSON(t, &req)
		if req.From != "owed@example.com" || req.To != "bob@example.com" || req.Subject != "Renewal" ||
			req.TextBody != "Renew soon" || req.HTMLBody != "<b>Renew</b>" || req.MessageStream != "outbound" ||
			req.Metadata["owed_idempotency_key"] != "k5" {
			t.Errorf("body %+v", req)
		}
	})
}

func client(t *testing.T, base string) *Client {
	t.Helper()
	return providertest.New(t, New, Config{ServerToken: token, From: "owed@example.com", BaseURL: base})
}

func TestSend(t *testing.T) {
	t.Parallel()
	srv := fake(t)
	c := client(t, srv.URL)
	srv.Reply(200, `{"To":"bob@example.com","SubmittedAt":"2026-03-01T12:00:00Z","MessageID":"b7bc2f4a-e38e","ErrorCode":0,"Message":"OK"}`, nil)
	providertest.Accept(t, c, delivery(), "b7bc2f4a-e38e", 200)
	// Postmark fails with 4xx, so a 200 without a MessageID is still a send.
	srv.Reply(200, `{"ErrorCode":0}`, nil)
	providertest.Accept(t, c, delivery(), "", 200)
	srv.Answer(providertest.Reply{Status: 200, Body: `{"MessageID":"b7bc`, Cut: true})
	providertest.Accept(t, c, delivery(), "", 200)
}

// pmError is Postmark's documented error body
// (https://postmarkapp.com/developer/api/overview#response-codes).
func pmError(code int, msg string) string {
	return fmt.Sprintf(`{"ErrorCode":%d,"Message":%q}`, code, msg)
}

// failures is Postmark's table in docs/providers.md "Failure classes".
var failures = []providertest.Row{
	{Status: 401, Code: "10", Meaning: "bad or missing server token", Body: pmError(10, "Bad or missing Server API token."), Class: provider.Account},
	{Status: 422, Code: "400", Meaning: "sender signature not found", Body: pmError(400, "The 'From' address you supplied is not a Sender Signature on your account."),
		Class: provider.Account},
	{Status: 422, Code: "401", Meaning: "sender signature not confirmed", Body: pmError(401, "Sender signature not confirmed."), Class: provider.Account},
	{Status: 422, Code: "405", Meaning: "not allowed to send: out of credits", Body: pmError(405, "Not allowed to send: you have run out of credits."),
		Class: provider.Account},
	{Status: 422, Code: "412", Meaning: "account pending approval", Body: pmError(412, "Account is pending approval."), Class: provider.Account},
	{Status: 422, Code: "300", Meaning: "invalid email request: the To address is invalid", Body: pmError(300, "Invalid 'To' address: 'bob@'."),
		Class: provider.Permanent, Recipient: true},
	{Status: 422, Code: "406", Meaning: "inactive recipient: bounced or marked spam", Body: pmError(406, "You tried to send to recipient(s) that have been marked as inactive."),
		Class: provider.Permanent, Recipient: true},
	{Status: 422, Code: "402", Meaning: "invalid JSON", Body: pmError(402, "Invalid JSON."), Class: provider.Permanent},
	{Status: 422, Code: "403", Meaning: "incompatible JSON", Body: pmError(403, "Incompatible JSON."), Class: provider.Permanent},
	{Status: 422, Code: "409", Meaning: "JSON required", Body: pmError(409, "JSON required."), Class: provider.Permanent},
	{Status: 422, Code: "411", Meaning: "any other ErrorCode: by its status", Body: pmError(411, "Forbidden attachment type."), Class: provider.Permanent},
	{Status: 429, Code: "429", Meaning: "rate limit exceeded", Body: pmError(429, "Rate limit exceeded."), Header: providertest.RetryAfter("20"),
		Class: provider.RateLimited, After: 20 * time.Second},
	{Status: 500, Code: "100", Meaning: "maintenance", Body: pmError(100, "Maintenance."), Class: provider.Transient, MaybeSent: true},
	{Status: 503, Meaning: "unavailable", Header: providertest.RetryAfter("5"), Class: provider.Transient, MaybeSent: true, After: 5 * time.Second},
}

func TestFailures(t *testing.T) {
	t.Parallel()
	srv := fake(t)
	c := client(t, srv.URL)
	providertest.CheckRows(t, srv, c, delivery(), token, failures)
	providertest.CheckRows(t, srv, c, delivery(), token, []providertest.Row{
		{Status: 401, Code: "10", Body: pmError(10, "Bad or missing API token "+token), Class: provider.Account},
		// An HTML 403 from the network layer in front of the API
		// (https://postmarkapp.com/support/article/getting-a-403-that-doesnt-look-like-a-postmark-error).
		{Status: 403, Body: "<html><head><title>403 Forbidden</title></head></html>", Class: provider.Permanent},
	})
}

func TestFailuresDocumented(t *testing.T) {
	t.Parallel()
	providertest.CheckDocTable(t, "postmark", failures)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	providertest.CheckConfigErrors(t, New, []providertest.ConfigCase[Config]{
		{Config: Config{}, Want: "OWED_POSTMARK_SERVER_TOKEN"},
		{Config: Config{ServerToken: token}, Want: "OWED_POSTMARK_FROM"},
		{Config: Config{ServerToken: token, From: "a@b", BaseURL: "http://u:p@x"}, Want: "OWED_POSTMARK_BASE_URL"},
	}, token)
}

// FuzzPostmarkResponse: the classifier must never panic, never accept a
// non-2xx or a body with an ErrorCode, and never leak the token.
func FuzzPostmarkResponse(f *testing.F) {
	f.Add(200, []byte(`{"MessageID":"x","ErrorCode":0}`))
	f.Add(422, []byte(`{"ErrorCode":406,"Message":"inactive"}`))
	f.Add(200, []byte(`{"MessageID":"x","ErrorCode":300}`))
	f.Add(429, []byte(`{"ErrorCode":"429"}`))
	for _, r := range failures {
		f.Add(r.Status, []byte(r.Body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		res, err := classify("postmark", provider.Response{Status: status, Header: http.Header{}, Body: body}, time.Now(), token)
		providertest.CheckOutcome(t, status, providertest.Any2xx, res, err, token)
	})
}
