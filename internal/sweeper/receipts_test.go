package sweeper

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider/webhook"
	"github.com/owedhq/owed/internal/receipt"
	"github.com/owedhq/owed/internal/stacktest"
)

// The receipt endpoints end to end: a callback signed as each provider
// documents it, through the sweeper's public handler, into the ledger.

const (
	twilioToken      = "twilio-test-auth-token-0123456789"
	receiptBase      = "https://owed.example.com"
	postmarkUser     = "postmark"
	postmarkPassword = "postmark-test-password-0123"
	apiToken         = "service-token-0123456789abcdef"
)

var webhookReceiptSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("receipt-secret-0123456789abcdef!"))

type receiptBundle struct {
	stack *stacktest.Stack
	h     http.Handler
	sg    *ecdsa.PrivateKey
}

func setupReceipts(t *testing.T) receiptBundle {
	t.Helper()
	t.Parallel()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	s := stacktest.New(t, stacktest.Options{})
	srv := newServer(t, s, func(c *Config) {
		c.APIToken = apiToken
		c.Receipt = receipt.Config{TwilioAuthToken: twilioToken, BaseURL: receiptBase,
			SendGridPublicKey: base64.StdEncoding.EncodeToString(der), PostmarkUser: postmarkUser,
			PostmarkPassword: postmarkPassword, WebhookSecret: webhookReceiptSecret}
	})
	return receiptBundle{stack: s, h: srv.Handler(), sg: priv}
}

// sent schedules a due row of tenant acme and settles it delivered through
// provider (a Sender's name) with message id msgID.
func (b receiptBundle) sent(t *testing.T, ref, provider, msgID string) int64 {
	t.Helper()
	ctx := context.Background()
	due := time.Now().Add(-time.Minute).UTC()
	rows, err := b.stack.Ledger.Schedule(ctx, "acme", []ledger.NewNotification{{Recipient: "user-1", Channel: "email",
		Kind: "reminder", RefID: ref, DueAt: due, Payload: json.RawMessage(`{"subject":"s","text":"t"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.stack.Ledger.ClaimForSend(ctx, "acme", rows[0].ID, ledger.ClaimParams{DueAt: due, LeaseFor: time.Minute})
	if err != nil || c.Outcome != ledger.ClaimSend {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	now := time.Now()
	if _, err := b.stack.Ledger.SettleDelivered(ctx, c.Hold, ledger.Attempt{Attempt: 1, Provider: provider,
		StartedAt: now, FinishedAt: now, ProviderMessageID: msgID, HTTPStatus: 202}); err != nil {
		t.Fatal(err)
	}
	return rows[0].ID
}

func (b receiptBundle) detail(t *testing.T, id int64) ledger.Detail {
	t.Helper()
	d, err := b.stack.Ledger.Get(context.Background(), "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (b receiptBundle) receipts(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.stack.DB.Owner.QueryRow(`SELECT count(*) FROM owed_receipts`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b receiptBundle) post(t *testing.T, r *http.Request) (int, receipt.Answer) {
	t.Helper()
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	var a receipt.Answer
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
			t.Fatalf("answer %s: %v", w.Body, err)
		}
	}
	return w.Code, a
}

// twilioCallback is a StatusCallback as Twilio posts it, signed with
// token over the public URL.
func twilioCallback(token, sid, status, code string) *http.Request {
	form := url.Values{"MessageSid": {sid}, "SmsSid": {sid}, "MessageStatus": {status}, "SmsStatus": {status},
		"AccountSid": {"AC1"}, "From": {"+15550001"}, "To": {"+15550002"}, "ApiVersion": {"2010-04-01"}}
	if code != "" {
		form.Set("ErrorCode", code)
	}
	r := httptest.NewRequest(http.MethodPost, "/receipts/twilio?tag=owed", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set(receipt.HeaderTwilioSignature, receipt.SignTwilio(token, receiptBase+"/receipts/twilio?tag=owed", form))
	return r
}

func (b receiptBundle) sendGridBatch(t *testing.T, key *ecdsa.PrivateKey, body string) *http.Request {
	t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	sum := sha256.Sum256(receipt.SendGridPayload(ts, []byte(body)))
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/receipts/sendgrid", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(receipt.HeaderSendGridSignature, base64.StdEncoding.EncodeToString(sig))
	r.Header.Set(receipt.HeaderSendGridTimestamp, ts)
	return r
}

func postmarkWebhook(user, password, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/receipts/postmark", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.SetBasicAuth(user, password)
	return r
}

func webhookReceipt(t *testing.T, secret, body string) *http.Request {
	t.Helper()
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Now().Unix()
	r := httptest.NewRequest(http.MethodPost, "/receipts/webhook", strings.NewReader(body))
	r.Header.Set(webhook.HeaderID, "rcpt_"+strconv.FormatInt(ts, 10))
	r.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	r.Header.Set(webhook.HeaderSignature, webhook.Sign(key, "rcpt_"+strconv.FormatInt(ts, 10), ts, []byte(body)))
	return r
}

func TestReceiptsOfEachProviderLandInTheLedger(t *testing.T) {
	b := setupReceipts(t)
	tw := b.sent(t, "R-1", "twilio:AC1", "SM100")
	sg := b.sent(t, "R-2", "sendgrid:ops@example.com", "sgid200")
	pm := b.sent(t, "R-3", "postmark:ops@example.com", "883953f4-6105-42a2-a16a-77a8eac79483")
	wh := b.sent(t, "R-4", "webhook:hooks.example.com", "msg-400")

	for name, c := range map[string]struct {
		req    *http.Request
		id     int64
		status ledger.ReceiptStatus
		code   string
	}{
		"twilio": {twilioCallback(twilioToken, "SM100", "undelivered", "30003"), tw, ledger.ReceiptBounced, "30003"},
		"sendgrid": {b.sendGridBatch(t, b.sg, `[{"event":"processed","sg_message_id":"sgid200.filter0001.1","timestamp":1700000000},
			{"event":"delivered","sg_message_id":"sgid200.filter0001.1","timestamp":1700000060,"response":"250 OK"}]`),
			sg, ledger.ReceiptDelivered, ""},
		"postmark": {postmarkWebhook(postmarkUser, postmarkPassword, `{"RecordType":"Bounce","Type":"HardBounce","TypeCode":1,
			"MessageID":"883953f4-6105-42a2-a16a-77a8eac79483","BouncedAt":"2026-03-01T12:00:00Z"}`), pm, ledger.ReceiptBounced, "HardBounce"},
		"webhook": {webhookReceipt(t, webhookReceiptSecret, `{"message_id":"msg-400","status":"failed","occurred_at":"2026-03-01T12:00:00Z","code":"mailbox full"}`),
			wh, ledger.ReceiptFailed, "mailbox full"},
	} {
		code, ans := b.post(t, c.req)
		if code != http.StatusOK || ans.Recorded != 1 {
			t.Errorf("%s: HTTP %d %+v, want 200 with one receipt recorded", name, code, ans)
			continue
		}
		d := b.detail(t, c.id)
		if d.State != ledger.StateDelivered || d.ReceiptStatus != c.status || d.ReceiptCode != c.code || d.ConfirmedAt == nil ||
			len(d.Receipts) != 1 || d.Receipts[0].Provider != name {
			t.Errorf("%s: state %s outcome %+v receipts %+v, want delivered with receipt %s (%q)", name, d.State, d.Outcome,
				d.Receipts, c.status, c.code)
		}
	}
	if n := b.receipts(t); n != 4 {
		t.Errorf("%d receipts recorded, want 4", n)
	}
}

func TestReceiptsWithABadSignatureAre401AndRecordNothing(t *testing.T) {
	b := setupReceipts(t)
	b.sent(t, "R-1", "twilio:AC1", "SM100")
	b.sent(t, "R-2", "sendgrid:ops@example.com", "sgid200")
	b.sent(t, "R-3", "postmark:ops@example.com", "pm300")
	b.sent(t, "R-4", "webhook:hooks.example.com", "msg-400")
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	unsigned := httptest.NewRequest(http.MethodPost, "/receipts/webhook", strings.NewReader(`{"message_id":"msg-400","status":"failed"}`))
	for name, r := range map[string]*http.Request{
		"twilio, another token":    twilioCallback("another-twilio-auth-token-000000", "SM100", "delivered", ""),
		"sendgrid, another key":    b.sendGridBatch(t, otherKey, `[{"event":"delivered","sg_message_id":"sgid200.f","timestamp":1700000060}]`),
		"postmark, wrong password": postmarkWebhook(postmarkUser, "not-the-postmark-password", `{"RecordType":"Delivery","MessageID":"pm300"}`),
		"postmark, no credentials": httptest.NewRequest(http.MethodPost, "/receipts/postmark", strings.NewReader(`{"RecordType":"Delivery","MessageID":"pm300"}`)),
		"webhook, another secret":  webhookReceipt(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("another-secret-0123456789abcdef")), `{"message_id":"msg-400","status":"failed"}`),
		"webhook, unsigned":        unsigned,
	} {
		if code, _ := b.post(t, r); code != http.StatusUnauthorized {
			t.Errorf("%s: HTTP %d, want 401", name, code)
		}
	}
	// A signed callback whose body was changed on the way.
	r := twilioCallback(twilioToken, "SM100", "delivered", "")
	r.Body = httptest.NewRequest(http.MethodPost, "/", strings.NewReader("MessageSid=SM100&MessageStatus=failed")).Body
	if code, _ := b.post(t, r); code != http.StatusUnauthorized {
		t.Errorf("twilio, tampered body: HTTP %d, want 401", code)
	}
	if n := b.receipts(t); n != 0 {
		t.Errorf("%d receipts recorded from refused callbacks, want 0", n)
	}
}

func TestReceiptReplaysRecordOnceAndUnknownIDsAre2xx(t *testing.T) {
	b := setupReceipts(t)
	id := b.sent(t, "R-1", "twilio:AC1", "SM100")
	for i := range 3 {
		code, ans := b.post(t, twilioCallback(twilioToken, "SM100", "delivered", ""))
		want := receipt.Answer{Recorded: 1}
		if i > 0 {
			want = receipt.Answer{Replayed: 1}
		}
		if code != http.StatusOK || ans != want {
			t.Errorf("callback %d: HTTP %d %+v, want 200 %+v", i+1, code, ans, want)
		}
	}
	if d := b.detail(t, id); len(d.Receipts) != 1 || d.ReceiptStatus != ledger.ReceiptDelivered {
		t.Errorf("after 3 identical callbacks: %+v %+v, want one delivered receipt", d.Outcome, d.Receipts)
	}
	// An id no accepted send had (another system on the same account, or
	// an id through another provider) is answered 2xx and recorded nowhere.
	for name, r := range map[string]*http.Request{
		"twilio":   twilioCallback(twilioToken, "SM999", "delivered", ""),
		"sendgrid": b.sendGridBatch(t, b.sg, `[{"event":"delivered","sg_message_id":"SM100.filter1","timestamp":1700000060}]`),
		"postmark": postmarkWebhook(postmarkUser, postmarkPassword, `{"RecordType":"Delivery","MessageID":"nope","DeliveredAt":"2026-03-01T12:00:00Z"}`),
		"webhook":  webhookReceipt(t, webhookReceiptSecret, `{"message_id":"nope","status":"delivered"}`),
	} {
		if code, ans := b.post(t, r); code != http.StatusOK || ans != (receipt.Answer{Unknown: 1}) {
			t.Errorf("%s, unknown id: HTTP %d %+v, want 200 with one unknown", name, code, ans)
		}
	}
	if n := b.receipts(t); n != 1 {
		t.Errorf("%d receipts, want 1", n)
	}
	// A status still inside Twilio is answered and ignored.
	if code, ans := b.post(t, twilioCallback(twilioToken, "SM100", "queued", "")); code != http.StatusOK || ans != (receipt.Answer{Ignored: 1}) {
		t.Errorf("queued: HTTP %d %+v, want 200 ignored", code, ans)
	}
}

// A bounce after the provider accepted the send leaves the row delivered
// and shows in the API's answer and the stats.
func TestABounceAfterAcceptedShowsInTheAPIAndStats(t *testing.T) {
	b := setupReceipts(t)
	since := time.Now().Add(-time.Hour)
	bounced := b.sent(t, "R-1", "postmark:ops@example.com", "pm-1")
	b.sent(t, "R-2", "postmark:ops@example.com", "pm-2")
	for _, body := range []string{
		`{"RecordType":"Delivery","MessageID":"pm-1","DeliveredAt":"2026-03-01T12:00:00Z"}`,
		`{"RecordType":"Bounce","Type":"HardBounce","MessageID":"pm-1","BouncedAt":"2026-03-01T12:05:00Z"}`,
		`{"RecordType":"Delivery","MessageID":"pm-2","DeliveredAt":"2026-03-01T12:00:00Z"}`,
	} {
		if code, ans := b.post(t, postmarkWebhook(postmarkUser, postmarkPassword, body)); code != http.StatusOK || ans.Recorded != 1 {
			t.Fatalf("%s: HTTP %d %+v", body, code, ans)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/v1/notifications/"+strconv.FormatInt(bounced, 10)+"?tenant=acme", nil)
	r.Header.Set("Authorization", "Bearer "+apiToken)
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	var got struct {
		Data struct {
			State         string           `json:"state"`
			ReceiptStatus string           `json:"receipt_status"`
			ReceiptCode   string           `json:"receipt_code"`
			ConfirmedAt   *time.Time       `json:"confirmed_at"`
			Receipts      []ledger.Receipt `json:"receipts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusOK {
		t.Fatalf("GET: HTTP %d %s (%v)", w.Code, w.Body, err)
	}
	if d := got.Data; d.State != "delivered" || d.ReceiptStatus != "bounced" || d.ReceiptCode != "HardBounce" ||
		d.ConfirmedAt == nil || !d.ConfirmedAt.Equal(time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)) || len(d.Receipts) != 2 {
		t.Errorf("GET answer %+v, want delivered with receipt bounced (HardBounce) at 12:05 and two receipts", d)
	}
	s, err := b.stack.Ledger.ReceiptStats(context.Background(), since)
	if err != nil {
		t.Fatal(err)
	}
	if (s != ledger.ReceiptStats{Accepted: 2, ConfirmedDelivered: 1, Bounced: 1}) {
		t.Errorf("receipt stats %+v, want 2 accepted: 1 confirmed delivered, 1 bounced", s)
	}
}

// An endpoint whose secret is not set does not exist.
func TestReceiptEndpointsWithoutTheirSecretAre404(t *testing.T) {
	_, h := setup(t)
	for _, p := range []string{"twilio", "sendgrid", "postmark", "webhook"} {
		if w := do(h, http.MethodPost, "/receipts/"+p, ""); w.Code != http.StatusNotFound {
			t.Errorf("/receipts/%s unconfigured: HTTP %d, want 404", p, w.Code)
		}
	}
}

// The endpoints take only POST, and a bounded body.
func TestReceiptEndpointsTakePOSTAndABoundedBody(t *testing.T) {
	b := setupReceipts(t)
	if w := do(b.h, http.MethodGet, "/receipts/postmark", ""); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /receipts/postmark: HTTP %d, want 405", w.Code)
	}
	big := postmarkWebhook(postmarkUser, postmarkPassword, `{"RecordType":"Delivery","Details":"`+strings.Repeat("x", receipt.MaxPostmarkBody)+`"}`)
	if code, _ := b.post(t, big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("an oversized body: HTTP %d, want 413", code)
	}
}

// The receipt settings are OWED_RECEIPT_*, read with the sweeper's, and a
// Twilio token without the public URL it signs stops the start.
func TestLoadConfigReadsTheReceiptSettings(t *testing.T) {
	minimalEnv(t)
	t.Setenv("OWED_RECEIPT_WEBHOOK_SECRET", webhookReceiptSecret)
	t.Setenv("OWED_RECEIPT_POSTMARK_USER", postmarkUser)
	t.Setenv("OWED_RECEIPT_POSTMARK_PASSWORD", postmarkPassword)
	c, err := LoadConfig()
	if err != nil || c.Receipt.WebhookSecret != webhookReceiptSecret || c.Receipt.PostmarkUser != postmarkUser ||
		c.Receipt.PostmarkPassword != postmarkPassword {
		t.Fatalf("LoadConfig: %v (receipt settings read: %t)", err, err == nil && c.Receipt.WebhookSecret != "")
	}
	t.Setenv("OWED_RECEIPT_TWILIO_AUTH_TOKEN", twilioToken)
	if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_RECEIPT_BASE_URL") ||
		strings.Contains(err.Error(), twilioToken) {
		t.Errorf("a Twilio token without OWED_RECEIPT_BASE_URL: %v, want an error naming it and not the token", err)
	}
}
