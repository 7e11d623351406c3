package sweeper

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"database/sql"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/api/openapitest"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/receipt"
	"github.com/owedhq/owed/internal/service"
)

// TestReceiptEndpointsFollowTheContract produces every outcome
// internal/api/openapi.json documents for /receipts/*, through the
// sweeper's public handler behind the service's body limit, each exchange
// validated against the contract; a documented outcome no exchange
// produced fails the test.
func TestReceiptEndpointsFollowTheContract(t *testing.T) {
	spec, err := openapitest.Load(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	b := setupReceipts(t)
	h := spec.Handler(t, service.LimitBody(b.h, service.MaxBodyBytes))
	send := func(r *http.Request, want int) {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("%s %s: HTTP %d %s, want %d", r.Method, r.URL.Path, w.Code, w.Body, want)
		}
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another-secret-0123456789abcdef!"))
	pad := strings.Repeat("x", 100<<10)
	chunked := func(r *http.Request) *http.Request { r.ContentLength = -1; return r }
	huge := strings.Repeat("x", service.MaxBodyBytes+1)
	for name, c := range map[string]struct{ ok, unsigned, malformed, bound, limit *http.Request }{
		"twilio": {twilioCallback(twilioToken, "SM999", "delivered", ""), twilioCallback("wrong-token", "SM999", "delivered", ""),
			twilioCallback(twilioToken, "", "delivered", ""), twilioCallback(twilioToken, "SM999"+pad, "delivered", ""),
			twilioCallback(twilioToken, "SM999"+huge, "delivered", "")},
		"sendgrid": {b.sendGridBatch(t, b.sg, `[{"event":"delivered","sg_message_id":"x.filter1","timestamp":1700000060}]`),
			b.sendGridBatch(t, other, `[]`), b.sendGridBatch(t, b.sg, `not json`),
			chunked(b.sendGridBatch(t, b.sg, `[`+huge+`]`)), b.sendGridBatch(t, b.sg, `[`+huge+`]`)},
		"postmark": {postmarkWebhook(postmarkUser, postmarkPassword, `{"RecordType":"Delivery","MessageID":"nope","DeliveredAt":"2026-03-01T12:00:00Z"}`),
			postmarkWebhook(postmarkUser, "wrong", `{}`), postmarkWebhook(postmarkUser, postmarkPassword, `not json`),
			chunked(postmarkWebhook(postmarkUser, postmarkPassword, `{"x":"`+huge+`"}`)),
			postmarkWebhook(postmarkUser, postmarkPassword, `{"x":"`+huge+`"}`)},
		"webhook": {webhookReceipt(t, webhookReceiptSecret, `{"message_id":"nope","status":"delivered"}`),
			webhookReceipt(t, otherSecret, `{}`), webhookReceipt(t, webhookReceiptSecret, `not json`),
			webhookReceipt(t, webhookReceiptSecret, `{"x":"`+pad+`"}`), webhookReceipt(t, webhookReceiptSecret, `{"x":"`+huge+`"}`)},
	} {
		send(c.ok, http.StatusOK)
		send(c.unsigned, http.StatusUnauthorized)
		send(c.malformed, http.StatusBadRequest)
		send(c.bound, http.StatusRequestEntityTooLarge)
		send(c.limit, http.StatusRequestEntityTooLarge)
		send(httptest.NewRequest(http.MethodGet, "/receipts/"+name, nil), http.StatusMethodNotAllowed)
	}

	// Unconfigured, an endpoint does not exist.
	bare := newServer(t, b.stack, func(c *Config) { c.Receipt = receipt.Config{} }).Handler()
	for _, p := range []string{"twilio", "sendgrid", "postmark", "webhook"} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/receipts/"+p, strings.NewReader("{}"))
		spec.Handler(t, bare).ServeHTTP(w, r)
		if w.Code != http.StatusNotFound {
			t.Errorf("unconfigured /receipts/%s: HTTP %d", p, w.Code)
		}
	}

	// A ledger that cannot be reached is 503: the provider retries.
	dead, err := sql.Open("postgres", "postgres://owed@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	rh, err := receipt.New(receipt.Config{TwilioAuthToken: twilioToken, BaseURL: receiptBase,
		SendGridPublicKey: sendGridKey(t, b.sg), PostmarkUser: postmarkUser, PostmarkPassword: postmarkPassword,
		WebhookSecret: webhookReceiptSecret}, ledger.New(dead, nil), nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	rh.Mount(mux)
	h = spec.Handler(t, mux)
	send(twilioCallback(twilioToken, "SM999", "delivered", ""), http.StatusServiceUnavailable)
	send(b.sendGridBatch(t, b.sg, `[{"event":"delivered","sg_message_id":"x.filter1","timestamp":1700000060}]`),
		http.StatusServiceUnavailable)
	send(postmarkWebhook(postmarkUser, postmarkPassword, `{"RecordType":"Delivery","MessageID":"nope","DeliveredAt":"2026-03-01T12:00:00Z"}`),
		http.StatusServiceUnavailable)
	send(webhookReceipt(t, webhookReceiptSecret, `{"message_id":"nope","status":"delivered"}`), http.StatusServiceUnavailable)

	if missing := spec.Unexercised("/receipts/"); len(missing) > 0 {
		t.Errorf("documented outcomes no exchange produced:\n  %s", strings.Join(missing, "\n  "))
	}
}

// sendGridKey is key's public half as OWED_RECEIPT_SENDGRID_PUBLIC_KEY
// holds it.
func sendGridKey(t *testing.T, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}
