package receipt

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// The Signed Event Webhook's headers.
// https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features
const (
	HeaderSendGridSignature = "X-Twilio-Email-Event-Webhook-Signature"
	HeaderSendGridTimestamp = "X-Twilio-Email-Event-Webhook-Timestamp"
)

// ParseSendGridKey reads the Signed Event Webhook's verification key: the
// base64 DER (SubjectPublicKeyInfo) SendGrid shows under Mail Settings, or
// the same key in PEM. It must be an ECDSA P-256 key.
func ParseSendGridKey(s string) (*ecdsa.PublicKey, error) {
	s = strings.TrimSpace(s)
	var der []byte
	if block, _ := pem.Decode([]byte(s)); block != nil {
		der = block.Bytes
	} else {
		var err error
		if der, err = base64.StdEncoding.DecodeString(s); err != nil {
			return nil, errors.New("not base64 or PEM: paste the verification key SendGrid shows for the Signed Event Webhook")
		}
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, errors.New("not a public key (base64 of DER SubjectPublicKeyInfo)")
	}
	key, ok := pub.(*ecdsa.PublicKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, errors.New("not an ECDSA P-256 key, which SendGrid signs with")
	}
	return key, nil
}

// SendGridPayload is what SendGrid signs: the timestamp header's value
// followed by the raw body.
func SendGridPayload(timestamp string, body []byte) []byte {
	return append([]byte(timestamp), body...)
}

// VerifySendGrid checks the Signed Event Webhook: signature is the base64
// ASN.1 (DER) ECDSA signature of SHA-256(timestamp + body) under key.
// SendGrid documents no freshness window for the timestamp, and a replayed
// batch records nothing new, so none is imposed.
func VerifySendGrid(key *ecdsa.PublicKey, signature, timestamp string, body []byte) error {
	if signature == "" || timestamp == "" {
		return ErrUnsigned
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(signature))
	if err != nil {
		return ErrSignature
	}
	sum := sha256.Sum256(SendGridPayload(timestamp, body))
	if !ecdsa.VerifyASN1(key, sum[:], sig) {
		return ErrSignature
	}
	return nil
}

// sendGridEvent is the part of an Event Webhook event owed reads.
// https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event
type sendGridEvent struct {
	Event     string `json:"event"`
	MessageID string `json:"sg_message_id"`
	// Timestamp is unix seconds.
	Timestamp json.Number `json:"timestamp"`
	Type      string      `json:"type"`     // bounce: "bounce" or "blocked"
	Status    string      `json:"status"`   // bounce: the enhanced SMTP code, "5.1.1"
	Reason    string      `json:"reason"`   // dropped: "Bounced Address", "Unsubscribed Address"…
	Response  string      `json:"response"` // deferred: the receiving server's answer
}

// sendGridStatuses maps the delivery events onto owed's receipt statuses.
// processed is SendGrid's own acceptance (the send's 202 said as much);
// open, click, spamreport, unsubscribe and the group events are
// engagement, not delivery: all are ignored.
var sendGridStatuses = map[string]ledger.ReceiptStatus{
	"delivered": ledger.ReceiptDelivered,
	"deferred":  ledger.ReceiptDeferred,
	"bounce":    ledger.ReceiptBounced,
	"dropped":   ledger.ReceiptFailed,
}

// ParseSendGrid reads an Event Webhook batch: a JSON array of events. An
// event's sg_message_id is the X-Message-Id the send returned followed by
// ".filter…"; the part before the first '.' is the id owed recorded. An
// event owed cannot use (no id, one too long) counts as ignored rather than
// failing the batch, which SendGrid would otherwise post again and again.
func ParseSendGrid(body []byte) (Batch, error) {
	var events []json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(body), &events); err != nil {
		return Batch{}, malformed("the Event Webhook body is not a JSON array of events")
	}
	var b Batch
	for _, raw := range events {
		var e sendGridEvent
		if json.Unmarshal(raw, &e) != nil {
			b.Ignored++
			continue
		}
		status, ok := sendGridStatuses[e.Event]
		id, _, _ := strings.Cut(strings.TrimSpace(e.MessageID), ".")
		r := ledger.Receipt{Provider: ProviderSendGrid, ProviderMessageID: id, Status: status, Code: sendGridCode(e)}
		r.OccurredAt = unixTime(e.Timestamp)
		if !ok || r.Validate() != nil {
			b.Ignored++
			continue
		}
		b.Receipts = append(b.Receipts, r)
	}
	return b, nil
}

// maxUnix bounds a provider's unix time (the year 9999), so a hostile value
// cannot make a time the database refuses.
const maxUnix = 253402300799

// unixTime reads unix seconds (an integer, or a number with a fraction);
// nil when absent or out of range.
func unixTime(n json.Number) *time.Time {
	f, err := n.Float64()
	if err != nil || f <= 0 || f >= maxUnix {
		return nil
	}
	t := time.Unix(int64(f), 0).UTC()
	return &t
}

// sendGridCode is the provider's reason for an event: a bounce's SMTP
// status (or its type, "blocked"), a drop's reason, a deferral's response.
func sendGridCode(e sendGridEvent) string {
	switch e.Event {
	case "bounce":
		if e.Status != "" {
			return clip(e.Status)
		}
		return clip(e.Type)
	case "dropped":
		return clip(e.Reason)
	case "deferred":
		return clip(e.Response)
	}
	return ""
}
