package receipt

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"net/url"
	"sort"
	"strings"

	"github.com/owedhq/owed/internal/ledger"
)

// HeaderTwilioSignature carries Twilio's signature of a webhook request.
const HeaderTwilioSignature = "X-Twilio-Signature"

// SignTwilio returns the X-Twilio-Signature of a form POST to fullURL:
// the base64 HMAC-SHA1, keyed by the account's auth token, of the full URL
// Twilio called (scheme, host, path and query) followed by every POST
// parameter sorted by name, each name immediately followed by its value.
// https://www.twilio.com/docs/usage/webhooks/webhooks-security
func SignTwilio(authToken, fullURL string, form url.Values) string {
	m := hmac.New(sha1.New, []byte(authToken))
	m.Write([]byte(fullURL))
	names := make([]string, 0, len(form))
	for k := range form {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		// A repeated parameter is signed once per distinct value, values
		// sorted, as Twilio's own helper libraries compute it.
		vals := append([]string(nil), form[k]...)
		sort.Strings(vals)
		for i, v := range vals {
			if i > 0 && v == vals[i-1] {
				continue
			}
			m.Write([]byte(k))
			m.Write([]byte(v))
		}
	}
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// VerifyTwilio checks signature against the form posted to fullURL.
// Twilio's helper libraries accept the URL with and without the scheme's
// default port (Twilio may sign either), and so does this.
func VerifyTwilio(authToken, fullURL string, form url.Values, signature string) error {
	if signature == "" {
		return ErrUnsigned
	}
	got, err := base64.StdEncoding.DecodeString(signature)
	if err != nil {
		return ErrSignature
	}
	for _, u := range urlVariants(fullURL) {
		want, _ := base64.StdEncoding.DecodeString(SignTwilio(authToken, u, form))
		if subtle.ConstantTimeCompare(got, want) == 1 {
			return nil
		}
	}
	return ErrSignature
}

// urlVariants is fullURL as given and with its default port toggled
// (https://host/x and https://host:443/x).
func urlVariants(fullURL string) []string {
	u, err := url.Parse(fullURL)
	if err != nil {
		return []string{fullURL}
	}
	def := map[string]string{"https": "443", "http": "80"}[u.Scheme]
	switch p := u.Port(); {
	case def == "":
	case p == "":
		v := *u
		v.Host = u.Host + ":" + def
		return []string{fullURL, v.String()}
	case p == def:
		v := *u
		v.Host = u.Hostname()
		if strings.Contains(v.Host, ":") {
			v.Host = "[" + v.Host + "]"
		}
		return []string{fullURL, v.String()}
	}
	return []string{fullURL}
}

// twilioStatuses maps Twilio's MessageStatus values onto owed's receipt
// statuses; a status missing here (queued, accepted, scheduled, sending,
// receiving, received, or one Twilio adds later) is still inside Twilio or
// about inbound messages, and is ignored.
// https://www.twilio.com/docs/messaging/guides/track-outbound-message-status
var twilioStatuses = map[string]ledger.ReceiptStatus{
	"sent":                ledger.ReceiptSent,
	"partially_delivered": ledger.ReceiptSent,
	"delivered":           ledger.ReceiptDelivered,
	"read":                ledger.ReceiptDelivered,
	// The carrier could not deliver it (unknown or unreachable handset,
	// 30003–30006): the recipient's side refused.
	"undelivered": ledger.ReceiptBounced,
	// Twilio could not send it at all (30007 filtered, 21610 opted out…),
	// or a scheduled message was canceled before it went.
	"failed":   ledger.ReceiptFailed,
	"canceled": ledger.ReceiptFailed,
}

// ParseTwilio reads one StatusCallback's form: MessageSid, MessageStatus
// and, on a failure, ErrorCode. The callback carries no time of the event,
// so the receipt has none (the ledger stamps when it arrived).
func ParseTwilio(form url.Values) (Batch, error) {
	status, ok := twilioStatuses[strings.ToLower(strings.TrimSpace(form.Get("MessageStatus")))]
	if !ok {
		return Batch{Ignored: 1}, nil
	}
	sid := strings.TrimSpace(form.Get("MessageSid"))
	if sid == "" {
		sid = strings.TrimSpace(form.Get("SmsSid"))
	}
	r := ledger.Receipt{Provider: ProviderTwilio, ProviderMessageID: sid, Status: status, Code: clip(form.Get("ErrorCode"))}
	if err := r.Validate(); err != nil {
		return Batch{}, malformed("the status callback's MessageSid is missing or too long")
	}
	return Batch{Receipts: []ledger.Receipt{r}}, nil
}
