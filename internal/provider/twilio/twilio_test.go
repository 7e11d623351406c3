package twilio

import (
	"net/http"
	"testing"
	"time"

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

	// A 201 is a send even when its body is unreadable: retrying it to learn
	// the sid would text the recipient twice.
	srv.Reply(201, `<html>`, nil)
	providertest.Accept(t, c, delivery(), "", 201)

	srv = fake(t, "", "MG999")
	srv.Reply(201, `{"sid":"SM124"}`, nil)
	providertest.Accept(t, client(t, Config{From: "+15550001111", MessagingServiceSID: "MG999", BaseURL: srv.URL}), delivery(), "SM124", 201)
}

func TestClassification(t *testing.T) {
	t.Parallel()
	srv := fake(t, "+15550001111", "")
	providertest.CheckClasses(t, srv, client(t, Config{From: "+15550001111", BaseURL: srv.URL}), delivery(), token, []providertest.Case{
		{Name: "http 429", Status: 429, Body: `{"code":20429,"message":"Too Many Requests","status":429}`, Header: providertest.RetryAfter("4"),
			Class: provider.RateLimited, After: 4 * time.Second, Code: "20429"},
		{Name: "20429 on 400", Status: 400, Body: `{"code":20429,"message":"Too Many Requests"}`, Class: provider.RateLimited, Code: "20429"},
		{Name: "invalid to", Status: 400, Body: `{"code":21211,"message":"The 'To' number is not a valid phone number.","status":400}`,
			Class: provider.Permanent, Code: "21211"},
		{Name: "stop", Status: 400, Body: `{"code":21610,"message":"Attempt to send to unsubscribed recipient"}`, Class: provider.Permanent, Code: "21610"},
		{Name: "not mobile", Status: 400, Body: `{"code":21614,"message":"'To' number is not a valid mobile number"}`, Class: provider.Permanent, Code: "21614"},
		{Name: "bad auth", Status: 401, Body: `{"code":20003,"message":"Authenticate"}`, Class: provider.Permanent, Code: "20003"},
		{Name: "other 4xx", Status: 404, Body: `{"code":20404,"message":"not found"}`, Class: provider.Permanent, Code: "20404"},
		{Name: "5xx", Status: 503, Body: `{"code":20500,"message":"Internal"}`, Header: providertest.RetryAfter("2"),
			Class: provider.Transient, After: 2 * time.Second, Code: "20500"},
		{Name: "echoed token", Status: 400, Body: `{"code":21211,"message":"` + token + `"}`, Class: provider.Permanent, Code: "21211"},
	})
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
	f.Add(400, []byte(`{"code":21211,"message":"bad"}`))
	f.Add(429, []byte(`{"code":"20429"}`))
	f.Add(500, []byte(`<html>`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		res, err := classify("twilio", provider.Response{Status: status, Header: http.Header{}, Body: body}, time.Now(), token)
		providertest.CheckOutcome(t, status, providertest.Any2xx, res, err, token)
	})
}
