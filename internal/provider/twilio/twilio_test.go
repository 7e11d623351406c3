package twilio

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/providertest"
)

const (
	sid   = "AC0123456789abcdef0123456789abcdef"
	token = "twilio-auth-token-secret"
)

func delivery() provider.Delivery {
	return provider.Delivery{Tenant: "t1", NotificationID: 3, Recipient: "+15558675310", Channel: payload.ChannelSMS,
		Kind: "appointment", IdempotencyKey: "k3", Content: payload.Content{Text: "Your appointment is at 3pm"}}
}

// fake answers like the Messages resource, after checking that the request
// is delivery() sent with the account's credentials from wantFrom or through
// wantService.
func fake(t *testing.T, wantFrom, wantService string) *providertest.Server {
	return providertest.NewServer(t, "/2010-04-01/Accounts/"+sid+"/Messages.json", func(t testing.TB, r *providertest.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != sid || p != token {
			t.Errorf("basic auth %q %q %v", u, p, ok)
		}
		form := r.Form(t)
		if form.Get("To") != "+15558675310" || form.Get("Body") != "Your appointment is at 3pm" ||
			form.Get("From") != wantFrom || form.Get("MessagingServiceSid") != wantService {
			t.Errorf("form %v", form)
		}
	})
}

func client(t *testing.T, cfg Config) *Client {
	t.Helper()
	cfg.AccountSID, cfg.AuthToken = sid, token
	return providertest.New(t, New, cfg)
}

func TestSend(t *testing.T) {
	t.Parallel()
	srv := fake(t, "+15550001111", "")
	c := client(t, Config{From: "+15550001111", BaseURL: srv.URL})
	srv.Reply(201, `{"sid":"SM123","status":"queued"}`, nil)
	providertest.Accept(t, c, delivery(), "SM123", 201)
	if c.Name() != "twilio:"+sid {
		t.Fatalf("name %q", c.Name())
	}

	// A 201 is a send even when its body is unreadable or breaks off:
	// retrying it to learn the sid would text the recipient twice.
	srv.Reply(201, `<html>`, nil)
	providertest.Accept(t, c, delivery(), "", 201)
	srv.Answer(providertest.Reply{Status: 201, Body: `{"sid":"SM12`, Cut: true})
	providertest.Accept(t, c, delivery(), "", 201)

	srv = fake(t, "", "MG999")
	srv.Reply(201, `{"sid":"SM124"}`, nil)
	providertest.Accept(t, client(t, Config{From: "+15550001111", MessagingServiceSID: "MG999", BaseURL: srv.URL}), delivery(), "SM124", 201)
}

// twilioError is Twilio's documented error body
// (https://www.twilio.com/docs/usage/troubleshooting/debugging-your-application#debugging-calls-to-the-rest-api).
func twilioError(status, code int, msg string) string {
	return fmt.Sprintf(`{"code":%d,"message":%q,"more_info":"https://www.twilio.com/docs/errors/%d","status":%d}`, code, msg, code, status)
}

// failures is Twilio's row of docs/providers.md "Failure classes": each row
// is sent through the fake, and the document must carry the same table.
var failures = []providertest.Row{
	{Status: 401, Code: "20003", Meaning: "authenticate: wrong or revoked credentials, suspended account", Body: twilioError(401, 20003, "Authenticate"),
		Class: provider.Account},
	{Status: 404, Code: "20404", Meaning: "not found: the account SID names no account", Body: twilioError(404, 20404, "The requested resource was not found"),
		Class: provider.Account},
	{Status: 429, Code: "20429", Meaning: "too many requests", Body: twilioError(429, 20429, "Too Many Requests"), Header: providertest.RetryAfter("4"),
		Class: provider.RateLimited, After: 4 * time.Second},
	{Status: 400, Code: "14107", Meaning: "over 30 messages between the two numbers in 30 s: that pair waits 30 s", Body: twilioError(400, 14107, "SMS send rate limit exceeded"),
		Class: provider.RateLimited, Recipient: true, After: 30 * time.Second},
	{Status: 400, Code: "21611", Meaning: "the From number's queue is full (10 hours of messages)", Body: twilioError(400, 21611, "This 'From' number has exceeded the maximum number of queued messages"),
		Class: provider.RateLimited},
	{Status: 400, Code: "21211", Meaning: "invalid To number", Body: twilioError(400, 21211, "The 'To' number +1555 is not a valid phone number."),
		Class: provider.Permanent, Recipient: true},
	{Status: 400, Code: "21408", Meaning: "SMS to the To number's region not enabled", Body: twilioError(400, 21408, "Permission to send an SMS has not been enabled for the region indicated by the 'To' number"),
		Class: provider.Permanent},
	{Status: 400, Code: "21606", Meaning: "From is not an SMS-capable number of the account", Body: twilioError(400, 21606, "The From phone number is not a valid, SMS-capable inbound phone number or short code for your account."),
		Class: provider.Account},
	{Status: 400, Code: "21608", Meaning: "trial account, unverified To number", Body: twilioError(400, 21608, "The number is unverified."),
		Class: provider.Permanent},
	{Status: 400, Code: "21610", Meaning: "the recipient replied STOP", Body: twilioError(400, 21610, "Attempt to send to unsubscribed recipient"),
		Class: provider.Permanent, Recipient: true},
	{Status: 400, Code: "21612", Meaning: "To not reachable by SMS from this sender", Body: twilioError(400, 21612, "The 'To' phone number is not currently reachable via SMS"),
		Class: provider.Permanent, Recipient: true},
	{Status: 400, Code: "21614", Meaning: "To is not a mobile number", Body: twilioError(400, 21614, "'To' number is not a valid mobile number"),
		Class: provider.Permanent, Recipient: true},
	{Status: 400, Code: "21617", Meaning: "body over 1600 characters", Body: twilioError(400, 21617, "The concatenated message body exceeds the 1600 character limit."),
		Class: provider.Permanent},
	{Status: 400, Code: "21604", Meaning: "any other error code: by its status", Body: twilioError(400, 21604, "A 'To' phone number is required."),
		Class: provider.Permanent},
	{Status: 500, Code: "20500", Meaning: "internal server error", Body: twilioError(500, 20500, "Internal Server Error"), Header: providertest.RetryAfter("2"),
		Class: provider.Transient, MaybeSent: true, After: 2 * time.Second},
	{Status: 503, Meaning: "unavailable, body not Twilio's JSON", Body: `<html>Service Unavailable</html>`,
		Class: provider.Transient, MaybeSent: true},
}

func TestFailures(t *testing.T) {
	t.Parallel()
	srv := fake(t, "+15550001111", "")
	c := client(t, Config{From: "+15550001111", BaseURL: srv.URL})
	providertest.CheckRows(t, srv, c, delivery(), token, failures)
	// Not documented rows, but held all the same: an echoed token is
	// redacted, and a 400 whose body breaks off is classified by its status.
	providertest.CheckRows(t, srv, c, delivery(), token, []providertest.Row{
		{Status: 400, Code: "21211", Body: twilioError(400, 21211, token), Class: provider.Permanent, Recipient: true},
		{Status: 400, Body: `{"code":216`, Cut: true, Class: provider.Permanent},
	})
}

func TestFailuresDocumented(t *testing.T) {
	t.Parallel()
	providertest.CheckDocTable(t, "twilio", failures)
}

// TestValidityPeriod: the row's expiry becomes Twilio's ValidityPeriod in
// whole seconds rounded down, is left out beyond Twilio's maximum (its
// default), and a row with less than a second left is not sent at all.
func TestValidityPeriod(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	srv := fake(t, "+15550001111", "")
	srv.Reply(201, `{"sid":"SM1"}`, nil)
	c := client(t, Config{From: "+15550001111", BaseURL: srv.URL, Clock: clock.NewStub(now)})
	for _, tt := range []struct {
		expires time.Time
		want    string
	}{
		{time.Time{}, ""},
		{now.Add(90*time.Second + 700*time.Millisecond), "90"},
		{now.Add(time.Second), "1"},
		{now.Add(MaxValidity - time.Second), "35999"},
		{now.Add(MaxValidity), ""},
		{now.Add(48 * time.Hour), ""},
	} {
		d := delivery()
		d.ExpiresAt = tt.expires
		providertest.Accept(t, c, d, "SM1", 201)
		if got := srv.Last(t).Form(t).Get("ValidityPeriod"); got != tt.want {
			t.Errorf("expires in %v: ValidityPeriod %q, want %q", tt.expires.Sub(now), got, tt.want)
		}
	}
	before := len(srv.Requests())
	d := delivery()
	d.ExpiresAt = now.Add(999 * time.Millisecond)
	_, err := c.Send(context.Background(), d)
	if !errors.Is(err, provider.ErrExpired) || provider.Classify(err).MaybeSent || len(srv.Requests()) != before {
		t.Fatalf("%v after %d requests; want ErrExpired and nothing sent", err, len(srv.Requests())-before)
	}
}

func TestStatusCallback(t *testing.T) {
	t.Parallel()
	srv := fake(t, "+15550001111", "")
	srv.Reply(201, `{"sid":"SM1"}`, nil)
	plain := client(t, Config{From: "+15550001111", BaseURL: srv.URL})
	providertest.Accept(t, plain, delivery(), "SM1", 201)
	if got := srv.Last(t).Form(t)["StatusCallback"]; got != nil {
		t.Errorf("without OWED_TWILIO_STATUS_CALLBACK the form has StatusCallback %q", got)
	}
	const cb = "https://owed.example.com/receipts/twilio"
	withCB := client(t, Config{From: "+15550001111", BaseURL: srv.URL, StatusCallback: cb})
	providertest.Accept(t, withCB, delivery(), "SM1", 201)
	if got := srv.Last(t).Form(t).Get("StatusCallback"); got != cb {
		t.Errorf("StatusCallback %q, want %q", got, cb)
	}
	for _, bad := range []string{"owed.example.com/receipts", "ftp://x/y", "https://user:secret@x/receipts/twilio", "https:///nohost"} {
		_, err := New(Config{AccountSID: "AC123", AuthToken: "tok", From: "+15550001111", StatusCallback: bad})
		if err == nil || !strings.Contains(err.Error(), "OWED_TWILIO_STATUS_CALLBACK") || strings.Contains(err.Error(), "secret") {
			t.Errorf("StatusCallback %q: error %v, want one naming OWED_TWILIO_STATUS_CALLBACK without echoing it", bad, err)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	providertest.CheckConfigErrors(t, New, []providertest.ConfigCase[Config]{
		{Config: Config{}, Want: "OWED_TWILIO_ACCOUNT_SID"},
		{Config: Config{AccountSID: sid}, Want: "OWED_TWILIO_AUTH_TOKEN"},
		{Config: Config{AccountSID: sid, AuthToken: token}, Want: "OWED_TWILIO_FROM"},
		{Config: Config{AccountSID: sid, AuthToken: token, From: "+1", BaseURL: "://"}, Want: "OWED_TWILIO_BASE_URL"},
	}, token)
}

// FuzzTwilioResponse: the classifier must never panic, never accept a
// non-2xx, and never leak the token (an unreadable 2xx is a send; see
// TestSend).
func FuzzTwilioResponse(f *testing.F) {
	f.Add(201, []byte(`{"sid":"SM1"}`))
	for _, r := range failures {
		f.Add(r.Status, []byte(r.Body))
	}
	f.Add(429, []byte(`{"code":"20429"}`))
	f.Add(500, []byte(`<html>`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		res, err := classify("twilio", provider.Response{Status: status, Header: http.Header{}, Body: body}, time.Now(), token)
		providertest.CheckOutcome(t, status, providertest.Any2xx, res, err, token)
	})
}
