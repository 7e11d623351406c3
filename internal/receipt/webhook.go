package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider/webhook"
)

// VerifyWebhook checks a receipt signed as Standard Webhooks sign
// (webhook-id, webhook-timestamp, webhook-signature: "v1," and the base64
// HMAC-SHA256 of "id.timestamp.body"), with the timestamp within
// webhook.DefaultTolerance (5 minutes) of now: the verification owed's own
// webhook adapter and the sandbox share (webhook.Verify).
// https://www.standardwebhooks.com/ (the specification's "Verifying" section)
func VerifyWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	err := webhook.Verify(secret, h, body, now, webhook.DefaultTolerance)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, webhook.ErrMissingHeaders):
		return ErrUnsigned
	}
	return ErrSignature
}

// WebhookReceipt is the body a webhook receiver POSTs to /receipts/webhook
// about a notification owed sent it. MessageID is the id owed recorded for
// the send: the "id" the receiver answered, else its x-message-id header,
// else the send's webhook-id (docs/receipts.md).
type WebhookReceipt struct {
	MessageID  string `json:"message_id"`
	Status     string `json:"status"`
	OccurredAt string `json:"occurred_at,omitempty"`
	Code       string `json:"code,omitempty"`
}

// webhookStatuses are the statuses a receiver may report.
var webhookStatuses = map[string]ledger.ReceiptStatus{
	"delivered": ledger.ReceiptDelivered,
	"bounced":   ledger.ReceiptBounced,
	"failed":    ledger.ReceiptFailed,
}

// ParseWebhook reads one receipt; occurred_at, when given, is RFC 3339.
func ParseWebhook(body []byte) (Batch, error) {
	var w WebhookReceipt
	if err := json.Unmarshal(bytes.TrimSpace(body), &w); err != nil {
		return Batch{}, malformed("the body is not a JSON object {message_id, status, occurred_at, code}")
	}
	status, ok := webhookStatuses[w.Status]
	if !ok {
		return Batch{}, malformed("status must be delivered, bounced or failed")
	}
	r := ledger.Receipt{Provider: ProviderWebhook, ProviderMessageID: strings.TrimSpace(w.MessageID), Status: status,
		Code: clip(w.Code)}
	if w.OccurredAt != "" {
		t, err := time.Parse(time.RFC3339, w.OccurredAt)
		if err != nil || t.Year() < 1 {
			return Batch{}, malformed("occurred_at must be an RFC 3339 time")
		}
		t = t.UTC()
		r.OccurredAt = &t
	}
	if err := r.Validate(); err != nil {
		return Batch{}, malformed("message_id must be 1 to %d bytes", ledger.MaxReceiptMessageIDLen)
	}
	return Batch{Receipts: []ledger.Receipt{r}}, nil
}
