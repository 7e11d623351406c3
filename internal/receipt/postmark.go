package receipt

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/service"
)

// Postmark signs nothing: its webhooks are authenticated by basic HTTP
// credentials written into the webhook URL
// (https://user:password@host/receipts/postmark).
// https://postmarkapp.com/developer/webhooks/webhooks-overview
//
// PostmarkAuth checks them in constant time (service.Bearer compares the
// digests of "user:password").
type PostmarkAuth struct{ want service.Bearer }

// NewPostmarkAuth returns the check for user and password; empty ones match
// nothing.
func NewPostmarkAuth(user, password string) PostmarkAuth {
	if user == "" || password == "" {
		return PostmarkAuth{}
	}
	return PostmarkAuth{want: service.NewBearer(user + ":" + password)}
}

// Verify checks r's basic credentials.
func (a PostmarkAuth) Verify(r *http.Request) error {
	user, password, ok := r.BasicAuth()
	if !ok {
		return ErrUnsigned
	}
	if !a.want.Matches(user + ":" + password) {
		return ErrSignature
	}
	return nil
}

// postmarkRecord is the part of a delivery or bounce webhook owed reads.
// https://postmarkapp.com/developer/webhooks/delivery-webhook
// https://postmarkapp.com/developer/webhooks/bounce-webhook
type postmarkRecord struct {
	RecordType  string `json:"RecordType"`
	MessageID   string `json:"MessageID"`
	DeliveredAt string `json:"DeliveredAt"`
	BouncedAt   string `json:"BouncedAt"`
	Type        string `json:"Type"`
}

// postmarkBounces maps a bounce's Type onto owed's receipt statuses (the
// bounce types of https://postmarkapp.com/developer/api/bounce-api). A type
// missing here (AutoResponder, AddressChange, Subscribe, Unsubscribe,
// OpenRelayTest, ChallengeVerification, InboundError, Unconfirmed, or one
// Postmark adds later) is not about the message reaching its recipient and
// is ignored.
var postmarkBounces = map[string]ledger.ReceiptStatus{
	"HardBounce":        ledger.ReceiptBounced,
	"BadEmailAddress":   ledger.ReceiptBounced,
	"Blocked":           ledger.ReceiptBounced,
	"DMARCPolicy":       ledger.ReceiptBounced,
	"SpamNotification":  ledger.ReceiptBounced,
	"VirusNotification": ledger.ReceiptBounced,
	"Unknown":           ledger.ReceiptBounced,
	// Temporary: the receiving server may yet take it.
	"Transient":  ledger.ReceiptDeferred,
	"SoftBounce": ledger.ReceiptDeferred,
	"DnsError":   ledger.ReceiptDeferred,
	// Postmark did not send it: the address is deactivated, or the send
	// failed inside Postmark.
	"ManuallyDeactivated":     ledger.ReceiptFailed,
	"SMTPApiError":            ledger.ReceiptFailed,
	"TemplateRenderingFailed": ledger.ReceiptFailed,
}

// ParsePostmark reads one webhook: RecordType Delivery (delivered at
// DeliveredAt) or Bounce (by its Type, at BouncedAt, the Type its code).
// Other record types (Open, Click, SpamComplaint, SubscriptionChange) are
// ignored. Postmark's times are ISO 8601 with an offset.
func ParsePostmark(body []byte) (Batch, error) {
	var rec postmarkRecord
	if err := json.Unmarshal(bytes.TrimSpace(body), &rec); err != nil {
		return Batch{}, malformed("the webhook body is not a Postmark JSON object")
	}
	r := ledger.Receipt{Provider: ProviderPostmark, ProviderMessageID: strings.TrimSpace(rec.MessageID)}
	var field, at string
	switch rec.RecordType {
	case "Delivery":
		r.Status, field, at = ledger.ReceiptDelivered, "DeliveredAt", rec.DeliveredAt
	case "Bounce":
		status, ok := postmarkBounces[rec.Type]
		if !ok {
			return Batch{Ignored: 1}, nil
		}
		r.Status, r.Code, field, at = status, clip(rec.Type), "BouncedAt", rec.BouncedAt
	default:
		return Batch{Ignored: 1}, nil
	}
	if at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil || t.Year() < 1 || t.Year() > 9999 {
			return Batch{}, malformed("%s is not an ISO 8601 time", field)
		}
		t = t.UTC()
		r.OccurredAt = &t
	}
	if err := r.Validate(); err != nil {
		return Batch{}, malformed("the webhook's MessageID is missing or too long")
	}
	return Batch{Receipts: []ledger.Receipt{r}}, nil
}
