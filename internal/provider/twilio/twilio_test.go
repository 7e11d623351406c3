package twilio

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/message"
	"github.com/owedhq/owed/internal/provider"
)

const (
	sid   = "AC0123456789abcdef0123456789abcdef"
	token = "twilio-auth-token-secret"
)

func delivery() provider.Delivery {
	return provider.Delivery{Tenant: "t1", NotificationID: 3, Recipient: "+15558675310", Channel: message.ChannelSMS,
		Kind: "appointment", IdempotencyKey: "k3", Message: message.Message{Text: "Your appointment is at 3pm"}}
}

func fake(t *testing.T, status int, body string, header map[string]string, wantFrom, wantService string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/2010-04-01/Accounts/"+sid+"/Messages.json" {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		if u, p, ok := r.BasicAuth(); !ok || u != sid || p != token {
			t.Errorf("basic auth %q %q %v", u, p, ok)
		}
		if err := r.ParseForm(); err != nil {
			t.Errorf("form: %v", err)
		}
		if r.PostForm.Get("To") != "+15558675310" || r.PostForm.Get("Body") != "Your appointment is at 3pm" ||
			r.PostForm.Get("From") != wantFrom || r.PostForm.Get("MessagingServiceSid") != wantService {
			t.Errorf("form %v", r.PostForm)
		}
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func client(t *testing.T, cfg Config) *Client {
	t.Helper()
	cfg.AccountSID, cfg.AuthToken = sid, token
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSend(t *testing.T) {
	t.Parallel()
	srv := fake(t, 201, `{"sid":"SM123","status":"queued"}`, nil, "+15550001111", "")
	c := client(t, Config{From: "+15550001111", BaseURL: srv.URL})
	res, err := c.Send(context.Background(), delivery())
	if err != nil || res.MessageID != "SM123" || res.HTTPStatus != 201 {
		t.Fatalf("%+v %v", res, err)
	}
	if c.Name() != "twilio:"+sid {
		t.Fatalf("name %q", c.Name())
	}

	// A 201 is a send even when its body is unreadable: retrying it to learn
	// the sid would text the recipient twice.
	srv = fake(t, 201, `<html>`, nil, "+15550001111", "")
	res, err = client(t, Config{From: "+15550001111", BaseURL: srv.URL}).Send(context.Background(), delivery())
	if err != nil || res.MessageID != "" || res.HTTPStatus != 201 {
		t.Fatalf("unreadable 201: %+v %v", res, err)
	}

	srv = fake(t, 201, `{"sid":"SM124"}`, nil, "", "MG999")
	res, err = client(t, Config{From: "+15550001111", MessagingServiceSID: "MG999", BaseURL: srv.URL}).Send(context.Background(), delivery())
	if err != nil || res.MessageID != "SM124" {
		t.Fatalf("messaging service: %+v %v", res, err)
	}
}

func TestClassification(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		body   string
		ra     string
		class  provider.Class
		after  time.Duration
		code   string
	}{
		{"http 429", 429, `{"code":20429,"message":"Too Many Requests","status":429}`, "4", provider.RateLimited, 4 * time.Second, "20429"},
		{"20429 on 400", 400, `{"code":20429,"message":"Too Many Requests"}`, "", provider.RateLimited, 0, "20429"},
		{"invalid to", 400, `{"code":21211,"message":"The 'To' number is not a valid phone number.","status":400}`, "", provider.Permanent, 0, "21211"},
		{"stop", 400, `{"code":21610,"message":"Attempt to send to unsubscribed recipient"}`, "", provider.Permanent, 0, "21610"},
		{"not mobile", 400, `{"code":21614,"message":"'To' number is not a valid mobile number"}`, "", provider.Permanent, 0, "21614"},
		{"bad auth", 401, `{"code":20003,"message":"Authenticate"}`, "", provider.Permanent, 0, "20003"},
		{"other 4xx", 404, `{"code":20404,"message":"not found"}`, "", provider.Permanent, 0, "20404"},
		{"5xx", 503, `{"code":20500,"message":"Internal"}`, "2", provider.Transient, 2 * time.Second, "20500"},
		{"echoed token", 400, `{"code":21211,"message":"` + token + `"}`, "", provider.Permanent, 0, "21211"},
	} {
		srv := fake(t, tt.status, tt.body, map[string]string{"Retry-After": tt.ra}, "+15550001111", "")
		_, err := client(t, Config{From: "+15550001111", BaseURL: srv.URL}).Send(context.Background(), delivery())
		pe := provider.Classify(err)
		if pe == nil || pe.Class != tt.class || pe.RetryAfter != tt.after || pe.Code != tt.code || pe.HTTPStatus != tt.status {
			t.Errorf("%s: %#v", tt.name, pe)
			continue
		}
		if strings.Contains(err.Error(), token) {
			t.Errorf("%s: error leaks the token: %v", tt.name, err)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "OWED_TWILIO_ACCOUNT_SID"},
		{Config{AccountSID: sid}, "OWED_TWILIO_AUTH_TOKEN"},
		{Config{AccountSID: sid, AuthToken: token}, "OWED_TWILIO_FROM"},
		{Config{AccountSID: sid, AuthToken: token, From: "+1", BaseURL: "://"}, "OWED_TWILIO_BASE_URL"},
	} {
		_, err := New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v", tt.cfg, err)
		} else if strings.Contains(err.Error(), token) {
			t.Errorf("error leaks the token: %v", err)
		}
	}
}

// FuzzTwilioResponse: the classifier must never panic, never accept a
// non-2xx or a response without a sid, and never leak the token.
func FuzzTwilioResponse(f *testing.F) {
	f.Add(201, []byte(`{"sid":"SM1"}`))
	f.Add(400, []byte(`{"code":21211,"message":"bad"}`))
	f.Add(429, []byte(`{"code":"20429"}`))
	f.Add(500, []byte(`<html>`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		res, err := classify("twilio", provider.Response{Status: status, Header: http.Header{}, Body: body}, time.Now(), token)
		if err == nil && (status < 200 || status > 299 || res.HTTPStatus != status) {
			t.Fatalf("accepted status %d id %q", status, res.MessageID)
		}
		if err != nil && strings.Contains(err.Error(), token) {
			t.Fatalf("token leaked: %v", err)
		}
	})
}
