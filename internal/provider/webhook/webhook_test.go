package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/message"
	"github.com/owedhq/owed/internal/provider"
)

var testSecret = SecretPrefix + base64.StdEncoding.EncodeToString([]byte("a very secret signing key!"))

func delivery() provider.Delivery {
	return provider.Delivery{
		Tenant: "t1", NotificationID: 42, Recipient: "ops@example.com", Channel: message.ChannelWebhook,
		Kind: "invoice.due", IdempotencyKey: "n42-1700000000",
		Message: message.Message{Data: json.RawMessage(`{"invoice":"INV-1"}`)},
	}
}

func newClient(t *testing.T, url string) *Client {
	t.Helper()
	c, err := New(Config{URL: url, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSendSignsAndDescribes(t *testing.T) {
	t.Parallel()
	var got *http.Request
	var gotBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		gotBody, _ = io.ReadAll(r.Body)
		if err := Verify(testSecret, r.Header, gotBody, time.Now(), 0); err != nil {
			t.Errorf("Verify: %v", err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"msg_1"}`))
	}))
	defer srv.Close()
	c := newClient(t, srv.URL+"/hooks")
	res, err := c.Send(context.Background(), delivery())
	if err != nil {
		t.Fatal(err)
	}
	if res.MessageID != "msg_1" || res.HTTPStatus != 200 {
		t.Fatalf("result %+v", res)
	}
	if got.Method != http.MethodPost || got.URL.Path != "/hooks" {
		t.Fatalf("request %s %s", got.Method, got.URL.Path)
	}
	if got.Header.Get(HeaderID) != "n42-1700000000" || got.Header.Get(HeaderTenant) != "t1" ||
		got.Header.Get(HeaderNotificationID) != "42" || got.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", got.Header)
	}
	var p Payload
	if err := json.Unmarshal(gotBody, &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != "invoice.due" || p.Data.NotificationID != 42 || p.Data.Recipient != "ops@example.com" ||
		string(p.Data.Payload) != `{"invoice":"INV-1"}` {
		t.Fatalf("payload %+v", p)
	}
	if c.Name() != "webhook:"+strings.TrimPrefix(srv.URL, "http://") {
		t.Fatalf("name %q", c.Name())
	}
}

func TestMessageIDFallbacks(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		header, body, want string
	}{
		{"", "", "n42-1700000000"},
		{"hdr_1", "", "hdr_1"},
		{"hdr_1", `{"id":"body_1"}`, "body_1"},
		{"", "<html>ok</html>", "n42-1700000000"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tt.header != "" {
				w.Header().Set("X-Message-Id", tt.header)
			}
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(tt.body))
		}))
		res, err := newClient(t, srv.URL).Send(context.Background(), delivery())
		srv.Close()
		if err != nil || res.MessageID != tt.want {
			t.Errorf("header %q body %q: %+v %v; want %q", tt.header, tt.body, res, err, tt.want)
		}
	}
}

func TestClassification(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status int
		ra     string
		class  provider.Class
		after  time.Duration
	}{
		{429, "12", provider.RateLimited, 12 * time.Second},
		{502, "3", provider.Transient, 3 * time.Second},
		{503, "", provider.Transient, 0},
		{504, "", provider.Transient, 0},
		{500, "", provider.Transient, 0},
		{410, "", provider.Permanent, 0},
		{400, "", provider.Permanent, 0},
		{401, "", provider.Permanent, 0},
		{422, "", provider.Permanent, 0},
		{302, "", provider.Permanent, 0},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tt.ra != "" {
				w.Header().Set("Retry-After", tt.ra)
			}
			if tt.status == 302 {
				w.Header().Set("Location", "http://example.invalid/")
			}
			w.WriteHeader(tt.status)
			w.Write([]byte(`{"error":"nope ` + testSecret + `"}`))
		}))
		_, err := newClient(t, srv.URL).Send(context.Background(), delivery())
		srv.Close()
		pe := provider.Classify(err)
		if pe == nil || pe.Class != tt.class || pe.RetryAfter != tt.after || pe.HTTPStatus != tt.status {
			t.Errorf("%d: %#v; want %v after %v", tt.status, pe, tt.class, tt.after)
			continue
		}
		if strings.Contains(err.Error(), testSecret) {
			t.Errorf("%d: error leaks the secret: %v", tt.status, err)
		}
	}
}

func TestTransportErrorIsTransient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := newClient(t, url).Send(context.Background(), delivery())
	if !provider.IsTransient(err) {
		t.Fatalf("connection refused: %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "OWED_WEBHOOK_URL"},
		{Config{URL: "ftp://x"}, "OWED_WEBHOOK_URL"},
		{Config{URL: "/relative"}, "OWED_WEBHOOK_URL"},
		{Config{URL: "http://x", Secret: "whsec_c2VjcmV0!!"}, "OWED_WEBHOOK_SECRET"},
		{Config{URL: "http://x", Secret: "whsec_", EnvPrefix: "OWED_SANDBOX"}, "OWED_SANDBOX_SECRET"},
	} {
		_, err := New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v; want mention of %s", tt.cfg, err, tt.want)
		}
		if err != nil && len(tt.cfg.Secret) > len(SecretPrefix) && strings.Contains(err.Error(), tt.cfg.Secret) {
			t.Errorf("error leaks the secret: %v", err)
		}
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	key, _ := ParseSecret(testSecret)
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"a":1}`)
	headers := func(id string, ts int64, sig string) http.Header {
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		h.Set(HeaderSignature, sig)
		return h
	}
	good := Sign(key, "id1", now.Unix(), body)
	other := Sign([]byte("other"), "id1", now.Unix(), body)
	for _, tt := range []struct {
		name string
		h    http.Header
		body []byte
		want error
	}{
		{"valid", headers("id1", now.Unix(), good), body, nil},
		{"rotated: second of two", headers("id1", now.Unix(), other+" "+good), body, nil},
		{"unknown versions ignored", headers("id1", now.Unix(), "v2,abc v1a,xyz "+good), body, nil},
		{"within tolerance", headers("id1", now.Unix()-299, Sign(key, "id1", now.Unix()-299, body)), body, nil},
		{"stale", headers("id1", now.Unix()-301, Sign(key, "id1", now.Unix()-301, body)), body, ErrTimestamp},
		{"future", headers("id1", now.Unix()+301, Sign(key, "id1", now.Unix()+301, body)), body, ErrTimestamp},
		{"tampered body", headers("id1", now.Unix(), good), []byte(`{"a":2}`), ErrSignature},
		{"other id", headers("id2", now.Unix(), good), body, ErrSignature},
		{"wrong key", headers("id1", now.Unix(), other), body, ErrSignature},
		{"missing", http.Header{}, body, ErrMissingHeaders},
	} {
		if err := Verify(testSecret, tt.h, tt.body, now, 0); err != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if err := Verify("not base64!", headers("id1", now.Unix(), good), body, now, 0); err == nil {
		t.Error("a malformed secret verified")
	}
}

// FuzzVerify feeds arbitrary headers to Verify: it must never panic, must
// reject whatever it was not signed with, and must accept a correct signature
// appended to any junk.
func FuzzVerify(f *testing.F) {
	f.Add("id1", "1700000000", "v1,abc", []byte("{}"))
	f.Add("", "-9223372036854775808", "v1, v1,,", []byte(nil))
	f.Add("x", "9223372036854775807", "v1,"+strings.Repeat("A", 44), []byte("body"))
	key, _ := ParseSecret(testSecret)
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, ts)
		h.Set(HeaderSignature, sig)
		if Verify(testSecret, h, body, now, 0) == nil {
			// Only a header carrying the real signature can verify.
			n, _ := strconv.ParseInt(ts, 10, 64)
			if !strings.Contains(sig, strings.TrimPrefix(Sign(key, h.Get(HeaderID), n, body), "v1,")) {
				t.Fatalf("forged signature verified: id=%q ts=%q sig=%q", id, ts, sig)
			}
		}
		h.Set(HeaderSignature, sig+" "+Sign(key, h.Get(HeaderID), now.Unix(), body))
		h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		if err := Verify(testSecret, h, body, now, 0); err != nil && h.Get(HeaderID) != "" {
			t.Fatalf("valid signature after junk %q rejected: %v", sig, err)
		}
	})
}

// FuzzWebhookResponse feeds arbitrary statuses and bodies to the classifier:
// it must never panic, must accept exactly the 2xx range, and must never
// return a success without a message id.
func FuzzWebhookResponse(f *testing.F) {
	f.Add(200, []byte(`{"id":"x"}`), "")
	f.Add(429, []byte(`{"error":"slow down"}`), "Mon, 02 Jan 2006 15:04:05 GMT")
	f.Add(503, []byte("<html>"), "120")
	f.Add(410, []byte(`{"message":null}`), "")
	f.Fuzz(func(t *testing.T, status int, body []byte, retryAfter string) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		res, err := classify("webhook", provider.Response{Status: status, Header: h, Body: body}, "key", time.Now())
		ok := status >= 200 && status < 300
		if ok != (err == nil) {
			t.Fatalf("status %d: err %v", status, err)
		}
		if ok && res.MessageID == "" {
			t.Fatalf("status %d: accepted without a message id", status)
		}
		if pe := provider.Classify(err); pe != nil && (pe.RetryAfter < 0 || pe.RetryAfter > provider.MaxRetryAfter) {
			t.Fatalf("retry after %v out of range", pe.RetryAfter)
		}
	})
}
