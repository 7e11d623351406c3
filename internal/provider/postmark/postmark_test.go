package postmark

import (
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
}

func TestClassification(t *testing.T) {
	t.Parallel()
	srv := fake(t)
	providertest.CheckClasses(t, srv, client(t, srv.URL), delivery(), token, []providertest.Case{
		{Name: "inactive", Status: 422, Body: `{"ErrorCode":406,"Message":"You tried to send to recipient(s) that have been marked as inactive."}`,
			Class: provider.Permanent, Code: "406"},
		{Name: "invalid email", Status: 422, Body: `{"ErrorCode":300,"Message":"Invalid 'To' address"}`, Class: provider.Permanent, Code: "300"},
		{Name: "bad token", Status: 401, Body: `{"ErrorCode":10,"Message":"Bad or missing API token ` + token + `"}`, Class: provider.Permanent, Code: "10"},
		{Name: "other 422", Status: 422, Body: `{"ErrorCode":412,"Message":"Account pending approval"}`, Class: provider.Permanent, Code: "412"},
		{Name: "rate limited", Status: 429, Body: `{"ErrorCode":429,"Message":"Rate limit exceeded"}`, Header: providertest.RetryAfter("20"),
			Class: provider.RateLimited, After: 20 * time.Second, Code: "429"},
		{Name: "server", Status: 500, Body: `{"ErrorCode":0,"Message":"Internal Server Error"}`, Class: provider.Transient},
		{Name: "unavailable", Status: 503, Header: providertest.RetryAfter("5"), Class: provider.Transient, After: 5 * time.Second},
	})
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
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		res, err := classify("postmark", provider.Response{Status: status, Header: http.Header{}, Body: body}, time.Now(), token)
		providertest.CheckOutcome(t, status, providertest.Any2xx, res, err, token)
	})
}
