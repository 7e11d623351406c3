// Package webhook is the Standard Webhooks adapter (standardwebhooks.com):
// every notification is a signed JSON POST to one configured endpoint. It is
// also how owed talks to the sandbox provider, which checks the signature with
// Verify.
//
// The webhook-id header is the row's idempotency key, so a receiver that
// de-duplicates on it (as the sandbox does) sees a retried send as a repeat.
// The adapter never follows a redirect and never puts the secret in an error.
package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/provider"
)

// The Standard Webhooks headers, and owed's own headers that let a receiver
// route a request without parsing its body.
const (
	HeaderID             = "webhook-id"
	HeaderTimestamp      = "webhook-timestamp"
	HeaderSignature      = "webhook-signature"
	HeaderTenant         = "owed-tenant"
	HeaderNotificationID = "owed-notification-id"
	HeaderMessageID      = "x-message-id"
)

// SecretPrefix marks a Standard Webhooks secret; the rest is base64.
const SecretPrefix = "whsec_"

// DefaultTolerance is how far a webhook-timestamp may be from the receiver's
// clock before Verify rejects it as a possible replay; it is the value the
// Standard Webhooks reference libraries use.
const DefaultTolerance = 5 * time.Minute

// DefaultEnvPrefix is the prefix of the variables named in configuration
// errors when Config.EnvPrefix is empty.
const DefaultEnvPrefix = "OWED_WEBHOOK"

// MinSecretBytes is the shortest signing key New accepts: a shorter HMAC key
// is within reach of an offline guess from one signed request.
const MinSecretBytes = 24

// Config configures the adapter. With the OWED_WEBHOOK prefix the variables
// are OWED_WEBHOOK_URL and OWED_WEBHOOK_SECRET.
type Config struct {
	// URL is the endpoint every notification is POSTed to.
	URL string `envconfig:"URL"`
	// Secret is the signing secret, "whsec_" followed by base64, or several
	// separated by spaces or commas: every request is signed with each, so a
	// receiver can move from one to the next (ParseSecrets). Empty sends
	// unsigned requests, which only an endpoint that does not verify (the
	// sandbox without a secret) accepts.
	Secret string `envconfig:"SECRET"`
	// Name is the Sender's name; "webhook:<host>" when empty.
	Name string `ignored:"true"`
	// EnvPrefix names the variables in errors; DefaultEnvPrefix when empty.
	EnvPrefix string `ignored:"true"`
	// AllowHTTP lets an http:// URL name any host. Without it http:// is
	// for loopback only, since the body carries recipients and content in
	// the clear; only the sandbox provider, a local test server that may
	// sit on a compose network, sets it.
	AllowHTTP bool `ignored:"true"`
	// Timeout bounds one send; provider.DefaultTimeout when zero.
	Timeout time.Duration `ignored:"true"`
	// Clock stamps webhook-timestamp and dates Retry-After answers;
	// clock.Real when nil.
	Clock clock.Clock `ignored:"true"`
}

// Client sends notifications as Standard Webhooks.
type Client struct {
	keys [][]byte
	name string
	// secrets are kept only to redact them from anything an endpoint echoes.
	secrets []string
	ep      *provider.Endpoint
}

var _ provider.Sender = (*Client)(nil)

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	prefix := cfg.EnvPrefix
	if prefix == "" {
		prefix = DefaultEnvPrefix
	}
	u, err := url.Parse(cfg.URL)
	if cfg.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL is not a secret, but it can carry a token in its query or
		// userinfo, so only its shape is described.
		return nil, fmt.Errorf("%s_URL: must be an absolute http or https URL (got %d characters)", prefix, len(cfg.URL))
	}
	var keys [][]byte
	if cfg.Secret != "" {
		if keys, err = ParseSecrets(cfg.Secret); err != nil {
			return nil, fmt.Errorf("%s_SECRET: %v", prefix, err)
		}
		for i, key := range keys {
			if len(key) < MinSecretBytes {
				return nil, fmt.Errorf("%s_SECRET: %s is %d bytes, want at least %d: \"whsec_\" followed by base64 of random bytes, e.g. whsec_$(openssl rand -base64 32)",
					prefix, keyName(i, len(keys)), len(key), MinSecretBytes)
			}
		}
	}
	if u.Scheme == "http" && !cfg.AllowHTTP && !loopback(u.Hostname()) {
		return nil, fmt.Errorf("%s_URL: http:// is for a loopback receiver only (got host %s): use https://", prefix, u.Host)
	}
	name := cfg.Name
	if name == "" {
		name = "webhook:" + u.Host
	}
	// Each key's text, with and without its prefix, is redacted, not only
	// the whole value: an endpoint echoing one of them must not leak it.
	secrets := []string{cfg.Secret}
	for _, f := range splitSecrets(cfg.Secret) {
		secrets = append(secrets, f, strings.TrimPrefix(f, SecretPrefix))
	}
	return &Client{keys: keys, name: name, secrets: secrets,
		ep: provider.NewEndpoint(name, cfg.URL, cfg.Timeout, cfg.Clock, secrets...)}, nil
}

// Name returns the provider account the client sends as.
func (c *Client) Name() string { return c.name }

// Payload is the JSON body of every request, in the Standard Webhooks shape
// {type, timestamp, data}.
type Payload struct {
	// Type is the notification's kind.
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      Data      `json:"data"`
}

// Data is the notification itself.
type Data struct {
	NotificationID int64  `json:"notification_id"`
	Tenant         string `json:"tenant"`
	Recipient      string `json:"recipient"`
	Channel        string `json:"channel"`
	Subject        string `json:"subject,omitempty"`
	Text           string `json:"text,omitempty"`
	HTML           string `json:"html,omitempty"`
	// Payload is the message's own JSON data (the webhook channel's body).
	Payload json.RawMessage   `json:"payload,omitempty"`
	Extras  map[string]string `json:"extras,omitempty"`
	// ExpiresAt is the row's expiry, when it has one: Standard Webhooks has
	// no expiry of its own, so a receiver that queues must drop the
	// notification itself once this has passed.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Send POSTs d as a signed Standard Webhook.
func (c *Client) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	if d.IdempotencyKey == "" {
		// The key is the webhook-id; without it the receiver cannot
		// de-duplicate, so this is a caller bug that no retry fixes.
		return provider.Result{}, provider.NewError(c.name, provider.Permanent, 0, "", "idempotency key is required")
	}
	now := c.ep.Now()
	data := Data{
		NotificationID: d.NotificationID, Tenant: d.Tenant, Recipient: d.Recipient, Channel: d.Channel,
		Subject: d.Content.Subject, Text: d.Content.Text, HTML: d.Content.HTML,
		Payload: d.Content.Data, Extras: d.Content.Extras,
	}
	if !d.ExpiresAt.IsZero() {
		exp := d.ExpiresAt.UTC()
		data.ExpiresAt = &exp
	}
	body, err := json.Marshal(Payload{Type: d.Kind, Timestamp: now.UTC(), Data: data})
	if err != nil {
		// Only invalid JSON in Message.Data fails here, and it fails every time.
		return provider.Result{}, provider.NewError(c.name, provider.Permanent, 0, "", "encode payload: "+err.Error())
	}
	ts := now.Unix()
	return c.ep.Post(ctx, "application/json", body, func(req *http.Request) {
		req.Header.Set(HeaderID, d.IdempotencyKey)
		req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		if len(c.keys) > 0 {
			sigs := make([]string, len(c.keys))
			for i, key := range c.keys {
				sigs[i] = Sign(key, d.IdempotencyKey, ts, body)
			}
			req.Header.Set(HeaderSignature, strings.Join(sigs, " "))
		}
		req.Header.Set(HeaderTenant, d.Tenant)
		req.Header.Set(HeaderNotificationID, strconv.FormatInt(d.NotificationID, 10))
	}, func(resp provider.Response, now time.Time) (provider.Result, error) {
		return classify(c.name, resp, d.IdempotencyKey, now, c.secrets...)
	})
}

// classify turns a response into a Result or a classified error, the
// Standard Webhooks way
// (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):
// a 2xx is accepted, whatever its body; 410 Gone is the receiver asking to
// stop, and, since every notification goes to this one endpoint, so are a
// refused signature (401, 403), a wrong URL (404) and a redirect (3xx, by
// provider.StatusClass): all are Account, pausing the channel instead of
// failing every row. 429 is RateLimited; 408 and 5xx are Transient (5xx
// MaybeSent, with Retry-After when given). Any other 4xx is Transient too,
// retried on the webhook's schedule of hours, since only 410 stops, unless
// the receiver says the message will never be accepted: a JSON body with
// "permanent": true is this message's Permanent failure.
func classify(name string, resp provider.Response, webhookID string, now time.Time, secrets ...string) (provider.Result, error) {
	var body struct {
		ID        string `json:"id"`
		Error     string `json:"error"`
		Message   string `json:"message"`
		Permanent bool   `json:"permanent"`
	}
	// Endpoints answer with anything from nothing to an HTML page; the
	// fields are used only when the body happens to be JSON carrying them.
	_ = json.Unmarshal(resp.Body, &body)
	if resp.Status >= 200 && resp.Status < 300 {
		id := body.ID
		if id == "" {
			id = resp.Header.Get(HeaderMessageID)
		}
		if id == "" {
			id = webhookID
		}
		return provider.Result{MessageID: id, HTTPStatus: resp.Status}, nil
	}
	e := provider.StatusError(name, resp, now)
	if msg := firstNonEmpty(body.Message, body.Error); msg != "" {
		e.Message = provider.Redact(msg, secrets...)
	}
	e.Code = provider.Redact(body.Error, secrets...)
	switch {
	case resp.Status == http.StatusGone, resp.Status == http.StatusForbidden, resp.Status == http.StatusNotFound:
		e.Reclassify(provider.Account, false)
	case e.Class == provider.Permanent && !body.Permanent:
		e.Reclassify(provider.Transient, false)
	}
	return provider.Result{}, e
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// loopback reports whether host names this machine: localhost or a loopback
// address. Any other name may resolve anywhere.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ParseSecret decodes a Standard Webhooks secret: "whsec_" followed by
// standard base64 (the prefix is optional). The decoded bytes are the HMAC key.
func ParseSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil {
		return nil, errors.New(`must be "whsec_" followed by base64 (the value is not valid base64)`)
	}
	if len(key) == 0 {
		return nil, errors.New(`must be "whsec_" followed by base64 of at least one byte`)
	}
	return key, nil
}

// ParseSecrets decodes one or more secrets separated by spaces or commas
// ("whsec_old whsec_new"), for a rotation: a sender signs with every key, a
// receiver accepts a signature by any. An error names the key by position,
// never by its value.
func ParseSecrets(secrets string) ([][]byte, error) {
	fields := splitSecrets(secrets)
	if len(fields) == 0 {
		return nil, errors.New(`must be "whsec_" followed by base64, or several separated by spaces or commas`)
	}
	keys := make([][]byte, len(fields))
	for i, f := range fields {
		key, err := ParseSecret(f)
		if err != nil {
			return nil, fmt.Errorf("%s %v", keyName(i, len(fields)), err)
		}
		keys[i] = key
	}
	return keys, nil
}

func splitSecrets(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
}

// keyName names the i-th of n keys in an error: "the key", or "key 2 of 3".
func keyName(i, n int) string {
	if n == 1 {
		return "the key"
	}
	return fmt.Sprintf("key %d of %d", i+1, n)
}

// Sign returns the webhook-signature value for one request: "v1," and the
// base64 HMAC-SHA256, under key, of "id.timestamp.body".
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, timestamp, body))
}

func mac(key []byte, id string, timestamp int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(timestamp, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Errors Verify returns; a receiver answers all of them with 401.
var (
	ErrMissingHeaders = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature header")
	ErrTimestamp      = errors.New("webhook: webhook-timestamp is not unix seconds within the tolerance")
	ErrSignature      = errors.New("webhook: no valid v1 signature in webhook-signature")
)

// Verify checks a Standard Webhooks request: the three headers are present,
// the timestamp is within tolerance of now (DefaultTolerance when tolerance is
// zero), and one of the space-separated "v1,<base64>" signatures matches one
// of secret's keys (ParseSecrets: one, or several during a rotation).
// Signatures of other versions are ignored, so a sender can rotate schemes.
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	keys, err := ParseSecrets(secret)
	if err != nil {
		return fmt.Errorf("webhook: secret: %v", err)
	}
	id, tsHeader, sigHeader := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsHeader == "" || sigHeader == "" {
		return ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil {
		return ErrTimestamp
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	// Compare in seconds, and without subtracting the untrusted value: an
	// arbitrary int64 would overflow either a time.Duration or the difference.
	n, limit := now.Unix(), int64(tolerance/time.Second)
	if ts < n-limit || ts > n+limit {
		return ErrTimestamp
	}
	sigs := ParseSignatures(sigHeader)
	for _, key := range keys {
		want := mac(key, id, ts, body)
		for _, sig := range sigs {
			if subtle.ConstantTimeCompare(sig, want) == 1 {
				return nil
			}
		}
	}
	return ErrSignature
}

// ParseSignatures returns the decoded v1 signatures in a webhook-signature
// header, skipping other versions and malformed entries.
func ParseSignatures(header string) [][]byte {
	var out [][]byte
	for _, field := range strings.Fields(header) {
		version, sig, ok := strings.Cut(field, ",")
		if !ok || version != "v1" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(b) != sha256.Size {
			continue
		}
		out = append(out, b)
	}
	return out
}
