package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/providertest"
)

var testSecret = SecretPrefix + base64.StdEncoding.EncodeToString([]byte("a very secret signing key!"))

func delivery() provider.Delivery {
	return provider.Delivery{
		Tenant: "t1", NotificationID: 42, Recipient: "ops@example.com", Channel: payload.ChannelWebhook,
		Kind: "invoice.due", IdempotencyKey: "n42-1700000000",
		Content: payload.Content{Data: json.RawMessage(`{"invoice":"INV-1"}`)},
	}
}

func newClient(t *testing.T, url string) *Client {
	t.Helper()
	return providertest.New(t, New, Config{URL: url, Secret: testSecret})
}

func TestSendSignsAndDescribes(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0).UTC()
	srv := providertest.NewServer(t, "/hooks", func(t testing.TB, r *providertest.Request) {
		if err := Verify(testSecret, r.Header, r.Body, now, 0); err != nil {
			t.Errorf("Verify: %v", err)
		}
	})
	srv.Reply(200, `{"id":"msg_1"}`, map[string]string{"Content-Type": "application/json"})
	c := providertest.New(t, New, Config{URL: srv.URL + "/hooks", Secret: testSecret, Clock: clock.NewStub(now)})
	providertest.Accept(t, c, delivery(), "msg_1", 200)
	got := srv.Last(t)
	if got.Header.Get(HeaderID) != "n42-1700000000" || got.Header.Get(HeaderTenant) != "t1" ||
		got.Header.Get(HeaderNotificationID) != "42" || got.Header.Get("Content-Type") != "application/json" ||
		got.Header.Get(HeaderTimestamp) != strconv.FormatInt(now.Unix(), 10) {
		t.Fatalf("headers %v", got.Header)
	}
	var p Payload
	if err := json.Unmarshal(got.Body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != "invoice.due" || p.Data.NotificationID != 42 || p.Data.Recipient != "ops@example.com" ||
		string(p.Data.Payload) != `{"invoice":"INV-1"}` || !p.Timestamp.Equal(now) {
		t.Fatalf("payload %+v", p)
	}
	if c.Name() != "webhook:"+strings.TrimPrefix(srv.URL, "http://") {
		t.Fatalf("name %q", c.Name())
	}
}

func TestMessageIDFallbacks(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, "", nil)
	c := newClient(t, srv.URL)
	for _, tt := range []struct {
		header, body, want string
	}{
		{"", "", "n42-1700000000"},
		{"hdr_1", "", "hdr_1"},
		{"hdr_1", `{"id":"body_1"}`, "body_1"},
		{"", "<html>ok</html>", "n42-1700000000"},
	} {
		var h map[string]string
		if tt.header != "" {
			h = map[string]string{"X-Message-Id": tt.header}
		}
		srv.Reply(http.StatusAccepted, tt.body, h)
		providertest.Accept(t, c, delivery(), tt.want, http.StatusAccepted)
	}
}

// failures is the webhook's (and so the sandbox's) table in
// docs/providers.md "Failure classes". Every answer echoes the secret, which
// no error may repeat.
var failures = []providertest.Row{
	{Status: 401, Code: "invalid_signature", Meaning: "the receiver refused the signature", Body: `{"error":"invalid_signature","message":"` + testSecret + `"}`,
		Class: provider.Account},
	{Status: 403, Meaning: "the receiver refused owed", Body: testSecret, Class: provider.Account},
	{Status: 404, Meaning: "no receiver at the URL", Class: provider.Account},
	{Status: 410, Meaning: "Gone: the receiver asks owed to stop", Class: provider.Account},
	{Status: 302, Meaning: "a redirect: the URL is wrong (never followed)", Header: map[string]string{"Location": "http://example.invalid/"},
		Class: provider.Account},
	{Status: 429, Meaning: "slow down: Retry-After", Header: providertest.RetryAfter("12"), Class: provider.RateLimited, After: 12 * time.Second},
	{Status: 408, Meaning: "request timeout", Class: provider.Transient},
	{Status: 400, Code: "invalid_payload", Meaning: "refused, retried on the schedule (only 410 stops)", Body: `{"error":"invalid_payload","message":"nope ` + testSecret + `"}`,
		Class: provider.Transient},
	{Status: 413, Meaning: "too large, retried on the schedule (only 410 stops)", Class: provider.Transient},
	{Status: 400, Code: "invalid_payload", Meaning: `never accepted: the body says "permanent": true`,
		Body: `{"error":"invalid_payload","message":"nope","permanent":true}`, Class: provider.Permanent},
	{Status: 422, Code: "recipient_rejected", Meaning: `never accepted (the sandbox's permanent recipient): "permanent": true`,
		Body: `{"error":"recipient_rejected","message":"recipient matches the permanent-failure pattern","permanent":true}`, Class: provider.Permanent},
	{Status: 500, Meaning: "the receiver failed", Class: provider.Transient, MaybeSent: true},
	{Status: 502, Meaning: "bad gateway: Retry-After", Header: providertest.RetryAfter("3"), Class: provider.Transient, MaybeSent: true, After: 3 * time.Second},
	{Status: 504, Code: "injected_timeout", Meaning: "gateway timeout", Body: `{"error":"injected_timeout"}`, Class: provider.Transient, MaybeSent: true},
	{Status: 0, Meaning: "no answer: the connection dropped after the request", Class: provider.Transient, MaybeSent: true},
}

func TestFailures(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, "", nil)
	providertest.CheckRows(t, srv, newClient(t, srv.URL), delivery(), testSecret, failures)
}

func TestFailuresDocumented(t *testing.T) {
	t.Parallel()
	providertest.CheckDocTable(t, "webhook", failures)
}

// TestRotation: with several secrets every request carries one signature
// per key, so a receiver holding any one of them verifies it, and one
// holding several accepts a signature by any.
func TestRotation(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0).UTC()
	second := SecretPrefix + base64.StdEncoding.EncodeToString([]byte("the next signing key, 24+ bytes"))
	other := SecretPrefix + base64.StdEncoding.EncodeToString([]byte("nobody's signing key, 24+ bytes"))
	for _, both := range []string{testSecret + " " + second, testSecret + "," + second, " " + testSecret + ",\t" + second + " "} {
		srv := providertest.NewServer(t, "", nil)
		c := providertest.New(t, New, Config{URL: srv.URL, Secret: both, Clock: clock.NewStub(now)})
		providertest.Accept(t, c, delivery(), "n42-1700000000", 200)
		got := srv.Last(t)
		if n := len(ParseSignatures(got.Header.Get(HeaderSignature))); n != 2 {
			t.Fatalf("%q: %d signatures in %q; want 2", both, n, got.Header.Get(HeaderSignature))
		}
		for _, verifier := range []string{testSecret, second, both, other + " " + second} {
			if err := Verify(verifier, got.Header, got.Body, now, 0); err != nil {
				t.Errorf("signed with %q, verified with %q: %v", both, verifier, err)
			}
		}
		if err := Verify(other, got.Header, got.Body, now, 0); err != ErrSignature {
			t.Errorf("verified by a key it was not signed with: %v", err)
		}
	}
}

func TestTransportErrorIsTransient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := newClient(t, url).Send(context.Background(), delivery())
	// A refused connection carried nothing: the retry is no duplicate.
	if !provider.IsTransient(err) || provider.Classify(err).MaybeSent {
		t.Fatalf("connection refused: %#v", provider.Classify(err))
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	const badSecret, shortSecret = "whsec_c2VjcmV0!!", "whsec_c2hvcnQ="
	providertest.CheckConfigErrors(t, New, []providertest.ConfigCase[Config]{
		{Config: Config{}, Want: "OWED_WEBHOOK_URL"},
		{Config: Config{URL: "ftp://x"}, Want: "OWED_WEBHOOK_URL"},
		{Config: Config{URL: "/relative"}, Want: "OWED_WEBHOOK_URL"},
		{Config: Config{URL: "http://x", Secret: badSecret}, Want: "OWED_WEBHOOK_SECRET"},
		{Config: Config{URL: "http://x", Secret: "whsec_", EnvPrefix: "OWED_SANDBOX"}, Want: "OWED_SANDBOX_SECRET"},
		{Config: Config{URL: "http://x", Secret: testSecret + " " + badSecret}, Want: "key 2 of 2"},
		{Config: Config{URL: "http://x", Secret: testSecret + "," + shortSecret}, Want: "key 2 of 2 is 5 bytes"},
		{Config: Config{URL: "http://x", Secret: " , "}, Want: "OWED_WEBHOOK_SECRET"},
	}, badSecret, shortSecret, testSecret)
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
	for _, r := range failures {
		f.Add(r.Status, []byte(r.Body), r.Header["Retry-After"])
	}
	f.Fuzz(func(t *testing.T, status int, body []byte, retryAfter string) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		res, err := classify("webhook", provider.Response{Status: status, Header: h, Body: body}, "key", time.Now(), testSecret)
		providertest.CheckOutcome(t, status, providertest.Any2xx, res, err, testSecret)
		if providertest.Any2xx(status) && (err != nil || res.MessageID == "") {
			t.Fatalf("status %d: %+v %v; want a success with a message id", status, res, err)
		}
	})
}
