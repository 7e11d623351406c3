package sendgrid

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/providertest"
)

const key = "SG.secret-api-key"

// now is the clients' stubbed clock: X-RateLimit-Reset is read against it.
var now = time.Unix(1_700_000_000, 0).UTC()

func delivery() provider.Delivery {
	return provider.Delivery{Tenant: "t1", NotificationID: 9, Recipient: "ann@example.com", Channel: payload.ChannelEmail,
		Kind: "invoice", IdempotencyKey: "k9",
		Content: payload.Content{Subject: "Invoice due", Text: "Pay it", HTML: "<p>Pay it</p>"}}
}

// fake answers like Mail Send, after checking that the request is
// delivery() sent with the API key.
func fake(t *testing.T) *providertest.Server {
	return providertest.NewServer(t, "/v3/mail/send", func(t testing.TB, r *providertest.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("headers %v", r.Header)
		}
		var req request
		r.JSON(t, &req)
		p := req.Personalizations
		if len(p) != 1 || len(p[0].To) != 1 || p[0].To[0].Email != "ann@example.com" ||
			p[0].CustomArgs["owed_idempotency_key"] != "k9" || req.From.Email != "owed@example.com" ||
			req.Subject != "Invoice due" || len(req.Content) != 2 ||
			req.Content[0].Type != "text/plain" || req.Content[1].Type != "text/html" {
			t.Errorf("body %+v", req)
		}
	})
}

func client(t *testing.T, base string) *Client {
	t.Helper()
	return providertest.New(t, New, Config{APIKey: key, From: "owed@example.com", BaseURL: base, Clock: clock.NewStub(now)})
}

func TestSend(t *testing.T) {
	t.Parallel()
	srv := fake(t)
	srv.Reply(202, "", map[string]string{"X-Message-Id": "sg-abc"})
	providertest.Accept(t, client(t, srv.URL), delivery(), "sg-abc", 202)
}

// sgError is SendGrid's documented error body
// (https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/errors).
func sgError(field, msg string) string {
	if field == "" {
		return fmt.Sprintf(`{"errors":[{"message":%q,"field":null,"help":null}]}`, msg)
	}
	return fmt.Sprintf(`{"errors":[{"message":%q,"field":%q,"help":"http://sendgrid.com/docs/API_Reference/Web_API_v3/Mail/errors.html"}]}`, msg, field)
}

// failures is SendGrid's table in docs/providers.md "Failure classes".
var failures = []providertest.Row{
	{Status: 401, Meaning: "the API key is wrong, expired or revoked", Body: sgError("", "The provided authorization grant is invalid, expired, or revoked"),
		Class: provider.Account},
	{Status: 403, Meaning: "the key lacks Mail Send, the From is unverified, or the account is blocked", Body: sgError("from", "The from address does not match a verified Sender Identity."),
		Class: provider.Account, Code: "from"},
	{Status: 429, Meaning: "rate limited: wait until X-RateLimit-Reset", Body: sgError("", "too many requests"),
		Header: map[string]string{"X-RateLimit-Reset": strconv.FormatInt(now.Add(90*time.Second).Unix(), 10)}, Class: provider.RateLimited, After: 90 * time.Second},
	{Status: 429, Meaning: "rate limited: no reset, Retry-After", Header: providertest.RetryAfter("7"), Class: provider.RateLimited, After: 7 * time.Second},
	{Status: 400, Code: "personalizations.0.to.0.email", Meaning: "the recipient's address is invalid",
		Body: sgError("personalizations.0.to.0.email", "Does not contain a valid address."), Class: provider.Permanent, Recipient: true},
	{Status: 400, Code: "content.0.value", Meaning: "the content is rejected", Body: sgError("content.0.value", "The content value must be a string at least one character in length."),
		Class: provider.Permanent},
	{Status: 413, Meaning: "payload too large", Class: provider.Permanent},
	{Status: 500, Meaning: "internal server error", Body: sgError("", "internal"), Class: provider.Transient, MaybeSent: true},
	{Status: 503, Meaning: "unavailable", Header: providertest.RetryAfter("3"), Class: provider.Transient, MaybeSent: true, After: 3 * time.Second},
}

func TestFailures(t *testing.T) {
	t.Parallel()
	srv := fake(t)
	c := client(t, srv.URL)
	providertest.CheckRows(t, srv, c, delivery(), key, failures)
	providertest.CheckRows(t, srv, c, delivery(), key, []providertest.Row{
		// An echoed key is redacted; a recipient's error is found behind
		// another's, and names the field.
		{Status: 403, Body: sgError("", "access forbidden "+key), Class: provider.Account},
		{Status: 400, Code: "personalizations.0.bcc.1.email", Body: `{"errors":[{"message":"x","field":"subject"},{"message":"Does not contain a valid address.","field":"personalizations.0.bcc.1.email"}]}`,
			Class: provider.Permanent, Recipient: true},
	})
}

func TestFailuresDocumented(t *testing.T) {
	t.Parallel()
	providertest.CheckDocTable(t, "sendgrid", failures)
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
	providertest.CheckConfigErrors(t, New, []providertest.ConfigCase[Config]{
		{Config: Config{}, Want: "OWED_SENDGRID_API_KEY"},
		{Config: Config{APIKey: key}, Want: "OWED_SENDGRID_FROM"},
		{Config: Config{APIKey: key, From: "a@b", BaseURL: "http://x/?k=1"}, Want: "OWED_SENDGRID_BASE_URL"},
	}, key)
}

// FuzzSendGridResponse: the classifier must never panic, never accept a
// non-2xx, keep RetryAfter in bounds and never leak the key.
func FuzzSendGridResponse(f *testing.F) {
	f.Add(202, []byte(""), "")
	f.Add(429, []byte(`{"errors":[{"message":"x"}]}`), "9223372036854775807")
	f.Add(429, []byte(`{"errors":[]}`), "-9223372036854775808")
	f.Add(400, []byte(`{"errors":[{"field":null}]}`), "")
	for _, r := range failures {
		f.Add(r.Status, []byte(r.Body), r.Header["X-RateLimit-Reset"])
	}
	f.Fuzz(func(t *testing.T, status int, body []byte, reset string) {
		h := http.Header{}
		h.Set("X-RateLimit-Reset", reset)
		res, err := classify("sendgrid", provider.Response{Status: status, Header: h, Body: body}, now, key)
		providertest.CheckOutcome(t, status, providertest.Any2xx, res, err, key)
	})
}
