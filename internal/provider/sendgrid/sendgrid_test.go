package sendgrid

import (
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

func TestClassification(t *testing.T) {
	t.Parallel()
	reset := strconv.FormatInt(now.Add(90*time.Second).Unix(), 10)
	srv := fake(t)
	providertest.CheckClasses(t, srv, client(t, srv.URL), delivery(), key, []providertest.Case{
		{Name: "rate limited", Status: 429, Body: `{"errors":[{"message":"too many requests"}]}`,
			Header: map[string]string{"X-RateLimit-Reset": reset}, Class: provider.RateLimited, After: 90 * time.Second},
		{Name: "rate limited, retry-after", Status: 429, Header: providertest.RetryAfter("7"), Class: provider.RateLimited, After: 7 * time.Second},
		{Name: "bad request", Status: 400, Body: `{"errors":[{"message":"Does not contain a valid address.","field":"personalizations.0.to.0.email"}]}`,
			Class: provider.Permanent},
		{Name: "unauthorized", Status: 401, Body: `{"errors":[{"message":"The provided authorization grant is invalid, expired, or revoked"}]}`,
			Class: provider.Permanent},
		{Name: "forbidden", Status: 403, Body: `{"errors":[{"message":"access forbidden ` + key + `"}]}`, Class: provider.Permanent},
		{Name: "payload too large", Status: 413, Class: provider.Permanent},
		{Name: "server", Status: 500, Body: `{"errors":[{"message":"internal"}]}`, Class: provider.Transient},
		{Name: "unavailable", Status: 503, Header: providertest.RetryAfter("3"), Class: provider.Transient, After: 3 * time.Second},
	})
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
	f.Fuzz(func(t *testing.T, status int, body []byte, reset string) {
		h := http.Header{}
		h.Set("X-RateLimit-Reset", reset)
		res, err := classify("sendgrid", provider.Response{Status: status, Header: h, Body: body}, now, key)
		providertest.CheckOutcome(t, status, providertest.Any2xx, res, err, key)
	})
}
