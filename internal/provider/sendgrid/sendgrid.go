// Package sendgrid is the SendGrid v3 Mail Send adapter: one email per
// delivery.
//
// SendGrid has no idempotency key for Mail Send; the row's key travels as a
// custom_arg so a duplicate can at least be recognised in the event webhook.
// The API key never appears in an error.
package sendgrid

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/provider"
)

// DefaultBaseURL is SendGrid's API.
const DefaultBaseURL = "https://api.sendgrid.com"

// Config configures the adapter; with the OWED_SENDGRID prefix the variables
// are OWED_SENDGRID_API_KEY, OWED_SENDGRID_FROM, OWED_SENDGRID_FROM_NAME and
// OWED_SENDGRID_BASE_URL.
type Config struct {
	APIKey string `envconfig:"API_KEY"`
	// From is a verified sender address; FromName its display name.
	From     string `envconfig:"FROM"`
	FromName string `envconfig:"FROM_NAME"`
	// BaseURL overrides DefaultBaseURL, for a fake server in tests.
	BaseURL string `envconfig:"BASE_URL"`
	// Timeout bounds one send; provider.DefaultTimeout when zero.
	Timeout time.Duration `ignored:"true"`
	// Clock dates Retry-After and X-RateLimit-Reset; clock.Real when nil.
	Clock clock.Clock `ignored:"true"`
}

// Client sends email through one SendGrid account.
type Client struct {
	cfg Config
	ep  *provider.Endpoint
}

var _ provider.Sender = (*Client)(nil)

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("OWED_SENDGRID_API_KEY: required (an API key with Mail Send permission)")
	}
	if !strings.Contains(cfg.From, "@") {
		return nil, fmt.Errorf("OWED_SENDGRID_FROM: required, a verified sender address (got %q)", cfg.From)
	}
	base, err := provider.BaseURL("OWED_SENDGRID_BASE_URL", cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	c.ep = provider.NewEndpoint(c.Name(), base+"/v3/mail/send", cfg.Timeout, cfg.Clock, cfg.APIKey)
	return c, nil
}

// Name is "sendgrid:<sender>": the API key is secret, and one sender maps to
// one account's rate limit in practice.
func (c *Client) Name() string { return "sendgrid:" + c.cfg.From }

type address struct {
	Email string `json:"email"`
	Name  string `json:"name,omitempty"`
}

type content struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

type personalization struct {
	To         []address         `json:"to"`
	CustomArgs map[string]string `json:"custom_args,omitempty"`
}

type request struct {
	Personalizations []personalization `json:"personalizations"`
	From             address           `json:"from"`
	Subject          string            `json:"subject"`
	Content          []content         `json:"content"`
}

// Send emails d to the address d.Recipient.
func (c *Client) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	r := request{
		Personalizations: []personalization{{
			To: []address{{Email: d.Recipient}},
			CustomArgs: map[string]string{
				"owed_idempotency_key": d.IdempotencyKey,
				"owed_notification_id": strconv.FormatInt(d.NotificationID, 10),
				"owed_tenant":          d.Tenant,
			},
		}},
		From:    address{Email: c.cfg.From, Name: c.cfg.FromName},
		Subject: d.Content.Subject,
	}
	// SendGrid requires text/plain before text/html when both are present.
	if d.Content.Text != "" {
		r.Content = append(r.Content, content{Type: "text/plain", Value: d.Content.Text})
	}
	if d.Content.HTML != "" {
		r.Content = append(r.Content, content{Type: "text/html", Value: d.Content.HTML})
	}
	return c.ep.PostJSON(ctx, r, func(req *http.Request) {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}, func(resp provider.Response, now time.Time) (provider.Result, error) {
		return classify(c.Name(), resp, now, c.cfg.APIKey)
	})
}

type errorResponse struct {
	Errors []struct {
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"errors"`
}

// recipientField matches the field of a Mail Send error about a recipient's
// address, "personalizations.0.to.0.email" and its cc and bcc siblings.
var recipientField = regexp.MustCompile(`^personalizations\.\d+\.(to|cc|bcc)\.\d+\.email$`)

// classify reads a Mail Send response
// (https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/responses
// and .../errors): a 2xx is accepted with the X-Message-Id header as the id;
// 401 (a wrong or revoked key) and 403 (the key lacks Mail Send, the From is
// not a verified sender, or the account is blocked after repeated bad
// requests) are Account; 429 is RateLimited until X-RateLimit-Reset (epoch
// seconds), falling back to Retry-After; a 400 about a recipient's address is
// the recipient's Permanent failure, with the field as the code; other 4xx
// are Permanent and 5xx Transient. SendGrid has no error codes of its own:
// the first error's field stands in for one.
func classify(name string, resp provider.Response, now time.Time, key string) (provider.Result, error) {
	if resp.Status >= 200 && resp.Status < 300 {
		// SendGrid always sets X-Message-Id on 202; a success without it is
		// still a send (see Result.MessageID).
		return provider.Result{MessageID: resp.Header.Get("X-Message-Id"), HTTPStatus: resp.Status}, nil
	}
	e := provider.StatusError(name, resp, now)
	switch e.Class {
	case provider.RateLimited:
		if d, ok := untilReset(resp.Header.Get("X-RateLimit-Reset"), now); ok {
			e.RetryAfter = d
		}
	case provider.Permanent:
		if resp.Status == http.StatusForbidden {
			e.Reclassify(provider.Account, false)
		}
	}
	var r errorResponse
	if json.Unmarshal(resp.Body, &r) != nil || len(r.Errors) == 0 {
		return provider.Result{}, e
	}
	first := r.Errors[0]
	for _, er := range r.Errors {
		if e.Class == provider.Permanent && recipientField.MatchString(er.Field) {
			first = er
			e.Reclassify(provider.Permanent, true)
			break
		}
	}
	e.Code = provider.Redact(first.Field, key)
	msg := first.Message
	if first.Field != "" {
		msg = first.Field + ": " + msg
	}
	e.Message = provider.Redact(msg, key)
	return provider.Result{}, e
}

// untilReset turns X-RateLimit-Reset, the epoch second the limit resets, into
// a wait from now, rounded up and capped at provider.MaxRetryAfter.
func untilReset(v string, now time.Time) (time.Duration, bool) {
	reset, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || reset < 0 {
		return 0, false
	}
	n := now.Unix()
	switch {
	case reset <= n:
		return 0, true
	case reset-n >= int64(provider.MaxRetryAfter/time.Second):
		return provider.MaxRetryAfter, true
	}
	// now carries a fraction of a second that Unix() dropped; waiting until
	// the reset second itself is exact.
	return time.Unix(reset, 0).Sub(now), true
}
