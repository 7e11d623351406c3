// Package receipt ingests what the providers say became of a message after
// they accepted it: Twilio's StatusCallback (twilio.go), SendGrid's Event
// Webhook (sendgrid.go), Postmark's delivery and bounce webhooks
// (postmark.go) and a Standard-Webhooks-signed receipt a webhook receiver
// sends back (webhook.go). Each provider has one verifier, built from the
// provider's documented scheme, and one parser that maps the provider's
// vocabulary onto ledger.ReceiptStatus; Handler serves them as
// POST /receipts/{twilio,sendgrid,postmark,webhook} and records what they
// parse through the ledger (ledger.RecordReceipt).
//
// The package never records anything from a request whose signature (or,
// for Postmark, basic credentials) it has not verified, never reads more
// than a provider's body bound, and never logs or echoes a secret. A
// receipt changes no row's state: it is kept beside the row, and the row's
// confirmed outcome follows it (owed_receipt_record,
// internal/ledger/sql/receipts.sql). Replays are harmless
// (the ledger keeps one of each receipt), and a message id no accepted send
// had is logged and answered 2xx, since the provider cannot do better by
// retrying it.
package receipt

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider/webhook"
)

// The provider families a receipt names: a Sender's name up to its first
// ':' ("twilio:AC…", "sendgrid:from@…", "postmark:from@…", "webhook:host").
const (
	ProviderTwilio   = "twilio"
	ProviderSendGrid = "sendgrid"
	ProviderPostmark = "postmark"
	ProviderWebhook  = "webhook"
)

// Body bounds, per endpoint. SendGrid posts events in batches (the largest
// body); Postmark's bounce webhook may carry the bounce's content.
const (
	MaxTwilioBody   = 64 << 10
	MaxSendGridBody = 4 << 20
	MaxPostmarkBody = 1 << 20
	MaxWebhookBody  = 64 << 10
)

// MinSecretLen is the shortest Twilio auth token and Postmark password
// Validate accepts (a Twilio auth token is 32 characters).
const MinSecretLen = 16

// Config is the receipt endpoints' configuration, read with the sweeper's
// (OWED_RECEIPT_*). An endpoint whose secret is empty is not served (404).
type Config struct {
	// TwilioAuthToken verifies X-Twilio-Signature.
	TwilioAuthToken string `envconfig:"RECEIPT_TWILIO_AUTH_TOKEN"`
	// SendGridPublicKey verifies the Signed Event Webhook: the verification
	// key SendGrid shows (base64 DER), or the same in PEM.
	SendGridPublicKey string `envconfig:"RECEIPT_SENDGRID_PUBLIC_KEY"`
	// PostmarkUser and PostmarkPassword are the basic credentials written
	// into Postmark's webhook URL (https://user:password@host/receipts/postmark).
	PostmarkUser     string `envconfig:"RECEIPT_POSTMARK_USER"`
	PostmarkPassword string `envconfig:"RECEIPT_POSTMARK_PASSWORD"`
	// WebhookSecret verifies a webhook receiver's receipts: a Standard
	// Webhooks secret, "whsec_" and base64.
	WebhookSecret string `envconfig:"RECEIPT_WEBHOOK_SECRET"`
	// BaseURL is the public URL in front of the sweeper (scheme, host and
	// any path prefix a proxy strips), which Twilio signs: the signed URL
	// is BaseURL followed by the path and query the sweeper receives.
	BaseURL string `envconfig:"RECEIPT_BASE_URL"`
}

// Validate names the first unusable setting. No message repeats a secret.
func (c Config) Validate() error {
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" ||
			u.Fragment != "" || u.User != nil {
			return errors.New("OWED_RECEIPT_BASE_URL must be an absolute http(s) URL without query, fragment or credentials, e.g. https://owed.example.com")
		}
	}
	switch {
	case c.TwilioAuthToken != "" && len(c.TwilioAuthToken) < MinSecretLen:
		return fmt.Errorf("OWED_RECEIPT_TWILIO_AUTH_TOKEN must be at least %d characters: the account's auth token", MinSecretLen)
	case c.TwilioAuthToken != "" && c.BaseURL == "":
		return errors.New("OWED_RECEIPT_BASE_URL must be set when OWED_RECEIPT_TWILIO_AUTH_TOKEN is: Twilio signs the public URL it calls")
	case (c.PostmarkUser == "") != (c.PostmarkPassword == ""):
		return errors.New("OWED_RECEIPT_POSTMARK_USER and OWED_RECEIPT_POSTMARK_PASSWORD must be set together")
	case strings.ContainsAny(c.PostmarkUser, ":@/"):
		return errors.New("OWED_RECEIPT_POSTMARK_USER must not contain ':', '@' or '/': it is the user part of the webhook URL")
	case c.PostmarkPassword != "" && len(c.PostmarkPassword) < MinSecretLen:
		return fmt.Errorf("OWED_RECEIPT_POSTMARK_PASSWORD must be at least %d characters", MinSecretLen)
	}
	if c.SendGridPublicKey != "" {
		if _, err := ParseSendGridKey(c.SendGridPublicKey); err != nil {
			return fmt.Errorf("OWED_RECEIPT_SENDGRID_PUBLIC_KEY: %v", err)
		}
	}
	if c.WebhookSecret != "" {
		key, err := webhook.ParseSecret(c.WebhookSecret)
		if err != nil {
			return fmt.Errorf("OWED_RECEIPT_WEBHOOK_SECRET: %v", err)
		}
		if len(key) < webhook.MinSecretBytes {
			return fmt.Errorf("OWED_RECEIPT_WEBHOOK_SECRET: the key is %d bytes, want at least %d", len(key), webhook.MinSecretBytes)
		}
	}
	return nil
}

// Errors a verifier returns; Handler answers both with 401.
var (
	ErrUnsigned  = errors.New("receipt: the request carries no signature or credentials")
	ErrSignature = errors.New("receipt: the signature or credentials do not verify")
)

// Batch is what one callback said: the receipts to record, and how many
// events it carried that owed does not record (opens, clicks, a status
// still inside the provider).
type Batch struct {
	Receipts []ledger.Receipt
	Ignored  int
}

// malformedError is a body that is not the provider's documented shape;
// Handler answers it with 400.
type malformedError struct{ msg string }

func (e malformedError) Error() string { return "receipt: " + e.msg }

func malformed(format string, args ...any) error { return malformedError{fmt.Sprintf(format, args...)} }

// clip bounds a provider's code to what the ledger keeps, at a rune
// boundary.
func clip(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(strings.TrimSpace(s), ""), "\x00", "")
	if len(s) <= ledger.MaxReceiptCodeLen {
		return s
	}
	s = s[:ledger.MaxReceiptCodeLen]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
