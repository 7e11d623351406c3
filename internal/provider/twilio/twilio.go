// Package twilio is the Twilio Programmable Messaging adapter: one SMS per
// delivery through the Messages resource.
//
// Twilio has no idempotency key for Messages, so a retry after a lost
// response can send twice; the auth token never appears in an error.
package twilio

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/provider"
)

// DefaultBaseURL is Twilio's REST API.
const DefaultBaseURL = "https://api.twilio.com"

// Twilio error codes with a documented meaning for a send
// (twilio.com/docs/api/errors).
const (
	codeTooManyRequests = 20429 // the account is over its request rate
	codeInvalidTo       = 21211 // the To number is not a valid phone number
	codeUnsubscribed    = 21610 // the recipient replied STOP
	codeNotMobile       = 21614 // the To number cannot receive SMS
)

// Config configures the adapter; with the OWED_TWILIO prefix the variables
// are OWED_TWILIO_ACCOUNT_SID, OWED_TWILIO_AUTH_TOKEN, OWED_TWILIO_FROM,
// OWED_TWILIO_MESSAGING_SERVICE_SID and OWED_TWILIO_BASE_URL.
type Config struct {
	AccountSID string `envconfig:"ACCOUNT_SID"`
	AuthToken  string `envconfig:"AUTH_TOKEN"`
	// From is the sending number in E.164. MessagingServiceSID, when set,
	// is used instead and lets Twilio pick the number.
	From                string `envconfig:"FROM"`
	MessagingServiceSID string `envconfig:"MESSAGING_SERVICE_SID"`
	// BaseURL overrides DefaultBaseURL, for a fake server in tests.
	BaseURL string `envconfig:"BASE_URL"`
	// Timeout bounds one send; provider.DefaultTimeout when zero.
	Timeout time.Duration `ignored:"true"`
	// Clock dates Retry-After answers; clock.Real when nil.
	Clock clock.Clock `ignored:"true"`
}

// Client sends SMS through one Twilio account.
type Client struct {
	cfg Config
	ep  *provider.Endpoint
}

var _ provider.Sender = (*Client)(nil)

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if !strings.HasPrefix(cfg.AccountSID, "AC") || strings.ContainsAny(cfg.AccountSID, "/?# ") {
		return nil, fmt.Errorf(`OWED_TWILIO_ACCOUNT_SID: required, the account SID starting "AC" (got %q)`, cfg.AccountSID)
	}
	if cfg.AuthToken == "" {
		return nil, fmt.Errorf("OWED_TWILIO_AUTH_TOKEN: required")
	}
	if cfg.From == "" && cfg.MessagingServiceSID == "" {
		return nil, fmt.Errorf("OWED_TWILIO_FROM: required (an E.164 number) unless OWED_TWILIO_MESSAGING_SERVICE_SID is set")
	}
	base, err := provider.BaseURL("OWED_TWILIO_BASE_URL", cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	c.ep = provider.NewEndpoint(c.Name(), base+"/2010-04-01/Accounts/"+cfg.AccountSID+"/Messages.json",
		cfg.Timeout, cfg.Clock, cfg.AuthToken)
	return c, nil
}

// Name is "twilio:<account sid>": the rate limit is the account's.
func (c *Client) Name() string { return "twilio:" + c.cfg.AccountSID }

// Send texts d.Content.Text to the number d.Recipient.
func (c *Client) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	form := url.Values{"To": {d.Recipient}, "Body": {d.Content.Text}}
	if c.cfg.MessagingServiceSID != "" {
		form.Set("MessagingServiceSid", c.cfg.MessagingServiceSID)
	} else {
		form.Set("From", c.cfg.From)
	}
	return c.ep.Post(ctx, "application/x-www-form-urlencoded", []byte(form.Encode()), func(req *http.Request) {
		req.SetBasicAuth(c.cfg.AccountSID, c.cfg.AuthToken)
	}, func(resp provider.Response, now time.Time) (provider.Result, error) {
		return classify(c.Name(), resp, now, c.cfg.AuthToken)
	})
}

type response struct {
	SID     string `json:"sid"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// classify reads a Messages response: 2xx with a sid is accepted; HTTP 429
// or code 20429 is RateLimited; codes 21211, 21610, 21614 and every other 4xx
// are Permanent; 5xx is Transient.
func classify(name string, resp provider.Response, now time.Time, token string) (provider.Result, error) {
	var r response
	// A body that is not the documented JSON leaves r empty, and the status
	// alone decides.
	_ = json.Unmarshal(resp.Body, &r)
	if resp.Status >= 200 && resp.Status < 300 {
		// Twilio answers 201 only when it queued the message, so a 2xx
		// without a readable sid is still a send (see Result.MessageID).
		return provider.Result{MessageID: r.SID, HTTPStatus: resp.Status}, nil
	}
	e := provider.StatusError(name, resp, now)
	if r.Code != 0 {
		e.Code = strconv.Itoa(r.Code)
	}
	if r.Message != "" {
		e.Message = provider.Redact(r.Message, token)
	}
	switch r.Code {
	case codeTooManyRequests:
		e.Class = provider.RateLimited
	case codeInvalidTo, codeUnsubscribed, codeNotMobile:
		e.Class = provider.Permanent
		e.RetryAfter = 0
	}
	return provider.Result{}, e
}
