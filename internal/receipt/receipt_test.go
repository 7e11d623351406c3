package receipt

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider/webhook"
)

// Twilio's published example (its request-validation docs and every
// helper library's tests): auth token 12345, this URL and form.
func TestTwilioSignatureMatchesTwiliosExample(t *testing.T) {
	form := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+14158675309"}, "Digits": {"1234"},
		"From": {"+14158675309"}, "To": {"+18005551212"}}
	const u, want = "https://mycompany.com/myapp.php?foo=1&bar=2", "RSOYDt4T1cUTdK1PDd93/VVr8B8="
	if got := SignTwilio("12345", u, form); got != want {
		t.Fatalf("SignTwilio = %s, want %s", got, want)
	}
	if err := VerifyTwilio("12345", u, form, want); err != nil {
		t.Errorf("the example does not verify: %v", err)
	}
	// Twilio may sign the URL with the default port; either verifies.
	if err := VerifyTwilio("12345", "https://mycompany.com:443/myapp.php?foo=1&bar=2", form, want); err != nil {
		t.Errorf("the example with :443 does not verify: %v", err)
	}
	for name, c := range map[string]struct {
		token, url, sig string
		form            url.Values
		want            error
	}{
		"tampered parameter": {"12345", u, want, url.Values{"CallSid": {"CA1234567890ABCDE"}, "Digits": {"9"}}, ErrSignature},
		"other query":        {"12345", "https://mycompany.com/myapp.php?foo=1&bar=3", want, form, ErrSignature},
		"other token":        {"54321", u, want, form, ErrSignature},
		"not base64":         {"12345", u, "%%%", form, ErrSignature},
		"missing":            {"12345", u, "", form, ErrUnsigned},
	} {
		if err := VerifyTwilio(c.token, c.url, c.form, c.sig); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func TestParseTwilioMapsTheStatuses(t *testing.T) {
	for status, want := range map[string]ledger.ReceiptStatus{
		"delivered": ledger.ReceiptDelivered, "undelivered": ledger.ReceiptBounced, "failed": ledger.ReceiptFailed,
		"sent": ledger.ReceiptSent, "read": ledger.ReceiptDelivered, "queued": "", "sending": "", "accepted": "",
		"mystery": "",
	} {
		b, err := ParseTwilio(url.Values{"MessageSid": {"SM1"}, "MessageStatus": {status}, "ErrorCode": {"30003"}})
		if err != nil {
			t.Fatalf("%s: %v", status, err)
		}
		if want == "" {
			if len(b.Receipts) != 0 || b.Ignored != 1 {
				t.Errorf("%s: %+v, want ignored", status, b)
			}
			continue
		}
		if len(b.Receipts) != 1 || b.Receipts[0].Status != want || b.Receipts[0].ProviderMessageID != "SM1" ||
			b.Receipts[0].Code != "30003" || b.Receipts[0].OccurredAt != nil || b.Receipts[0].Provider != ProviderTwilio {
			t.Errorf("%s: %+v, want one %s receipt of SM1 with code 30003 and no time", status, b, want)
		}
	}
	if _, err := ParseTwilio(url.Values{"MessageStatus": {"delivered"}}); err == nil {
		t.Error("a delivered callback without MessageSid parsed")
	}
}

// sendGridKey is a test key pair, its public half as SendGrid shows it
// (base64 DER).
func sendGridKey(t testing.TB) (*ecdsa.PrivateKey, string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return priv, base64.StdEncoding.EncodeToString(der)
}

// signSendGrid signs as the Signed Event Webhook does: ECDSA over
// SHA-256(timestamp + body), base64 of the ASN.1 signature.
func signSendGrid(t testing.TB, priv *ecdsa.PrivateKey, ts string, body []byte) string {
	t.Helper()
	sum := sha256.Sum256(append([]byte(ts), body...))
	sig, err := ecdsa.SignASN1(rand.Reader, priv, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(sig)
}

func TestSendGridSignature(t *testing.T) {
	priv, pub := sendGridKey(t)
	key, err := ParseSendGridKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := base64.StdEncoding.DecodeString(pub)
	if _, err := ParseSendGridKey(string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))); err != nil {
		t.Errorf("the key in PEM: %v", err)
	}
	body := []byte(`[{"event":"delivered","sg_message_id":"abc.filter1","timestamp":1700000000}]`)
	sig := signSendGrid(t, priv, "1700000000", body)
	if err := VerifySendGrid(key, sig, "1700000000", body); err != nil {
		t.Fatalf("a signed batch does not verify: %v", err)
	}
	other, _ := sendGridKey(t)
	for name, c := range map[string]struct {
		sig, ts string
		body    []byte
		want    error
	}{
		"body changed":      {sig, "1700000000", []byte(`[{"event":"bounce","sg_message_id":"abc.filter1"}]`), ErrSignature},
		"timestamp changed": {sig, "1700000001", body, ErrSignature},
		"other key":         {signSendGrid(t, other, "1700000000", body), "1700000000", body, ErrSignature},
		"garbage":           {"bm90IGEgc2lnbmF0dXJl", "1700000000", body, ErrSignature},
		"no signature":      {"", "1700000000", body, ErrUnsigned},
		"no timestamp":      {sig, "", body, ErrUnsigned},
	} {
		if err := VerifySendGrid(key, c.sig, c.ts, c.body); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for name, k := range map[string]any{"an Ed25519 key": edPub, "a P-384 key": &p384.PublicKey} {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseSendGridKey(base64.StdEncoding.EncodeToString(der)); err == nil {
			t.Errorf("%s parsed as SendGrid's", name)
		}
	}
}

func TestParseSendGridBatch(t *testing.T) {
	body := []byte(`[
	 {"event":"processed","sg_message_id":"m1.filter0001.1","timestamp":1700000000},
	 {"event":"delivered","sg_message_id":"m1.filter0001.1","timestamp":1700000060,"response":"250 OK"},
	 {"event":"bounce","sg_message_id":"m2.filter0001.2","timestamp":1700000070,"type":"bounce","status":"5.1.1","reason":"no such user"},
	 {"event":"bounce","sg_message_id":"m5.filter0001.2","timestamp":1700000070,"type":"blocked"},
	 {"event":"dropped","sg_message_id":"m3.filter0001.3","timestamp":1700000080,"reason":"Bounced Address"},
	 {"event":"deferred","sg_message_id":"m4.filter0001.4","timestamp":1700000090,"response":"400 try again later"},
	 {"event":"open","sg_message_id":"m1.filter0001.1","timestamp":1700000100},
	 {"event":"delivered","timestamp":1700000100},
	 "not an event"
	]`)
	b, err := ParseSendGrid(body)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id, code string
		status   ledger.ReceiptStatus
		at       int64
	}{{"m1", "", ledger.ReceiptDelivered, 1700000060}, {"m2", "5.1.1", ledger.ReceiptBounced, 1700000070},
		{"m5", "blocked", ledger.ReceiptBounced, 1700000070}, {"m3", "Bounced Address", ledger.ReceiptFailed, 1700000080},
		{"m4", "400 try again later", ledger.ReceiptDeferred, 1700000090}}
	if len(b.Receipts) != len(want) || b.Ignored != 4 {
		t.Fatalf("%d receipts, %d ignored (%+v), want %d and 4", len(b.Receipts), b.Ignored, b.Receipts, len(want))
	}
	for i, w := range want {
		r := b.Receipts[i]
		if r.ProviderMessageID != w.id || r.Status != w.status || r.Code != w.code || r.OccurredAt == nil ||
			r.OccurredAt.Unix() != w.at || r.Provider != ProviderSendGrid {
			t.Errorf("receipt %d: %+v, want %+v", i, r, w)
		}
	}
	if _, err := ParseSendGrid([]byte(`{"event":"delivered"}`)); err == nil {
		t.Error("an object, not an array, parsed")
	}
}

func TestParsePostmark(t *testing.T) {
	for name, c := range map[string]struct {
		body   string
		status ledger.ReceiptStatus
		code   string
		at     string
	}{
		"delivery": {`{"RecordType":"Delivery","ServerID":23,"MessageID":"883953f4-6105-42a2-a16a-77a8eac79483","Recipient":"john@example.com","DeliveredAt":"2014-08-01T13:28:10.2735393-04:00","Details":"Test delivery webhook details"}`,
			ledger.ReceiptDelivered, "", "2014-08-01T17:28:10Z"},
		"hard bounce": {`{"RecordType":"Bounce","ID":42,"Type":"HardBounce","TypeCode":1,"MessageID":"883953f4-6105-42a2-a16a-77a8eac79483","BouncedAt":"2014-08-01T13:28:10.2735393-04:00"}`,
			ledger.ReceiptBounced, "HardBounce", "2014-08-01T17:28:10Z"},
		"soft bounce": {`{"RecordType":"Bounce","Type":"SoftBounce","TypeCode":4096,"MessageID":"m","BouncedAt":"2024-01-02T03:04:05Z"}`,
			ledger.ReceiptDeferred, "SoftBounce", "2024-01-02T03:04:05Z"},
		"auto responder": {`{"RecordType":"Bounce","Type":"AutoResponder","MessageID":"m","BouncedAt":"2024-01-02T03:04:05Z"}`, "", "", ""},
		"open":           {`{"RecordType":"Open","MessageID":"m","ReceivedAt":"2024-01-02T03:04:05Z"}`, "", "", ""},
	} {
		b, err := ParsePostmark([]byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.status == "" {
			if len(b.Receipts) != 0 || b.Ignored != 1 {
				t.Errorf("%s: %+v, want ignored", name, b)
			}
			continue
		}
		if len(b.Receipts) != 1 {
			t.Fatalf("%s: %+v, want one receipt", name, b)
		}
		r := b.Receipts[0]
		if r.Status != c.status || r.Code != c.code || r.OccurredAt == nil ||
			r.OccurredAt.Truncate(time.Second).Format(time.RFC3339) != c.at || r.Provider != ProviderPostmark {
			t.Errorf("%s: %+v, want %s %q at %s", name, r, c.status, c.code, c.at)
		}
	}
	for _, bad := range []string{`[]`, `{"RecordType":"Delivery","MessageID":""}`,
		`{"RecordType":"Delivery","MessageID":"m","DeliveredAt":"yesterday"}`} {
		if _, err := ParsePostmark([]byte(bad)); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

func TestPostmarkBasicAuth(t *testing.T) {
	auth := NewPostmarkAuth("postmark", "a-long-postmark-password")
	req := func(user, pass string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/receipts/postmark", nil)
		if user != "" {
			r.SetBasicAuth(user, pass)
		}
		return r
	}
	if err := auth.Verify(req("postmark", "a-long-postmark-password")); err != nil {
		t.Errorf("the right credentials: %v", err)
	}
	if err := auth.Verify(req("postmark", "wrong-postmark-password")); !errors.Is(err, ErrSignature) {
		t.Errorf("a wrong password: %v", err)
	}
	if err := auth.Verify(req("", "")); !errors.Is(err, ErrUnsigned) {
		t.Errorf("no credentials: %v", err)
	}
	if err := (PostmarkAuth{}).Verify(req("", ":")); err == nil {
		t.Error("an unconfigured check accepted")
	}
}

const testWebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestWebhookReceipt(t *testing.T) {
	key, err := webhook.ParseSecret(testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1700000000, 0)
	body := []byte(`{"message_id":"msg-1","status":"bounced","occurred_at":"2023-11-14T22:13:20Z","code":"550"}`)
	h := http.Header{}
	h.Set(webhook.HeaderID, "rcpt_1")
	h.Set(webhook.HeaderTimestamp, "1700000000")
	h.Set(webhook.HeaderSignature, webhook.Sign(key, "rcpt_1", 1700000000, body))
	if err := VerifyWebhook(testWebhookSecret, h, body, now); err != nil {
		t.Fatalf("a signed receipt: %v", err)
	}
	if err := VerifyWebhook(testWebhookSecret, h, body, now.Add(6*time.Minute)); !errors.Is(err, ErrSignature) {
		t.Errorf("a receipt 6 minutes old: %v, want refused", err)
	}
	if err := VerifyWebhook(testWebhookSecret, h, append(body, ' '), now); !errors.Is(err, ErrSignature) {
		t.Errorf("a changed body: %v", err)
	}
	if err := VerifyWebhook(testWebhookSecret, http.Header{}, body, now); !errors.Is(err, ErrUnsigned) {
		t.Errorf("no headers: %v", err)
	}
	b, err := ParseWebhook(body)
	if err != nil || len(b.Receipts) != 1 {
		t.Fatalf("parse: %+v %v", b, err)
	}
	if r := b.Receipts[0]; r.ProviderMessageID != "msg-1" || r.Status != ledger.ReceiptBounced || r.Code != "550" ||
		r.OccurredAt == nil || r.OccurredAt.Unix() != 1700000000 || r.Provider != ProviderWebhook {
		t.Errorf("parsed %+v", r)
	}
	for _, bad := range []string{`{"message_id":"m","status":"opened"}`, `{"status":"delivered"}`,
		`{"message_id":"m","status":"delivered","occurred_at":"soon"}`, `[]`,
		`{"message_id":"` + strings.Repeat("x", 300) + `","status":"delivered"}`} {
		if _, err := ParseWebhook([]byte(bad)); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

func TestConfigValidateNamesTheVariable(t *testing.T) {
	_, pub := sendGridKey(t)
	good := Config{TwilioAuthToken: strings.Repeat("t", 32), BaseURL: "https://owed.example.com",
		SendGridPublicKey: pub, PostmarkUser: "postmark", PostmarkPassword: strings.Repeat("p", 20),
		WebhookSecret: "whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))}
	if err := good.Validate(); err != nil {
		t.Fatalf("a good configuration: %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the empty configuration (every endpoint off): %v", err)
	}
	for want, change := range map[string]func(*Config){
		"OWED_RECEIPT_BASE_URL must be set":   func(c *Config) { c.BaseURL = "" },
		"OWED_RECEIPT_BASE_URL must be":       func(c *Config) { c.BaseURL = "owed.example.com" },
		"OWED_RECEIPT_TWILIO_AUTH_TOKEN":      func(c *Config) { c.TwilioAuthToken = "short" },
		"OWED_RECEIPT_SENDGRID_PUBLIC_KEY":    func(c *Config) { c.SendGridPublicKey = "not a key" },
		"must be set together":                func(c *Config) { c.PostmarkPassword = "" },
		"OWED_RECEIPT_POSTMARK_PASSWORD must": func(c *Config) { c.PostmarkPassword = "short" },
		"OWED_RECEIPT_WEBHOOK_SECRET":         func(c *Config) { c.WebhookSecret = "whsec_c2hvcnQ=" },
	} {
		c := good
		change(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error naming %q, got %v", want, err)
		}
		if err != nil && (strings.Contains(err.Error(), good.PostmarkPassword) || strings.Contains(err.Error(), good.TwilioAuthToken)) {
			t.Errorf("the error repeats a secret: %v", err)
		}
	}
}
