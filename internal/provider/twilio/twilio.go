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

// codes are the Twilio error codes a Messages create answers with that mean
// more than their HTTP status, each from its page
// https://www.twilio.com/docs/api/errors/<code>. A code not listed here is
// classified by its status (401 Account, 429 RateLimited, other 4xx
// Permanent, 5xx Transient).
var codes = map[int]provider.Rule{
	20003: {Class: provider.Account},                      // Authenticate: a wrong or revoked SID/token, or a suspended account
	20404: {Class: provider.Account},                      // not found: owed posts to one fixed path, so the account SID names no account
	20429: {Class: provider.RateLimited},                  // too many requests for the account
	14107: {Class: provider.RateLimited, Recipient: true}, // over 30 messages between the From and To numbers in 30 s: that pair waits 30 s (pairLimitWait)
	21611: {Class: provider.RateLimited},                  // the From number's queue holds 10 hours of messages: the account's sender is full
	21211: {Class: provider.Permanent, Recipient: true},   // the 'To' number is not a valid phone number
	21408: {Class: provider.Permanent},                    // SMS to the To number's region is not enabled (geo permissions)
	21606: {Class: provider.Account},                      // the From number is not an SMS-capable number of this account
	21608: {Class: provider.Permanent},                    // a trial account sending to an unverified number
	21610: {Class: provider.Permanent, Recipient: true},   // the recipient replied STOP
	21612: {Class: provider.Permanent, Recipient: true},   // the 'To' number is not reachable by SMS from this sender
	21614: {Class: provider.Permanent, Recipient: true},   // the 'To' number is not a mobile number
	21617: {Class: provider.Permanent},                    // the body exceeds 1600 characters
}

// pairLimitWait is how long Twilio refuses messages between two numbers
// after error 14107 ("set any further messages in the loop to failed status
// for 30 seconds", https://www.twilio.com/docs/api/errors/14107): the wait
// of a 14107 that carries no Retry-After.
const pairLimitWait = 30 * time.Second

// MaxValidity is the longest ValidityPeriod Twilio accepts, and its default
// (https://www.twilio.com/docs/api/errors/21624: whole seconds from 1 to
// 36,000). A row expiring later is sent without one.
const MaxValidity = 36000 * time.Second

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
	// StatusCallback, when set, is sent with every message, so Twilio posts
	// the message's delivery status there (the sweeper's /receipts/twilio,
	// docs/receipts.md) even without a Messaging Service that has one.
	// https://www.twilio.com/docs/messaging/api/message-resource#create-a-message-resource
	StatusCallback string `envconfig:"STATUS_CALLBACK"`
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
	if cfg.StatusCallback != "" {
		if u, err := url.Parse(cfg.StatusCallback); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			return nil, fmt.Errorf("OWED_TWILIO_STATUS_CALLBACK: must be an absolute http(s) URL without credentials, e.g. https://owed.example.com/receipts/twilio")
		}
	}
	c := &Client{cfg: cfg}
	c.ep = provider.NewEndpoint(c.Name(), base+"/2010-04-01/Accounts/"+cfg.AccountSID+"/Messages.json",
		cfg.Timeout, cfg.Clock, cfg.AuthToken)
	return c, nil
}

// Name is "twilio:<account sid>": the rate limit is the account's.
func (c *Client) Name() string { return "twilio:" + c.cfg.AccountSID }

// Send texts d.Content.Text to the number d.Recipient. A row that expires
// within MaxValidity is sent with a ValidityPeriod of its whole seconds left,
// so Twilio drops the message rather than deliver it late; one with less
// than a second left is not sent (provider.Expired).
func (c *Client) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	form := url.Values{"To": {d.Recipient}, "Body": {d.Content.Text}}
	if c.cfg.MessagingServiceSID != "" {
		form.Set("MessagingServiceSid", c.cfg.MessagingServiceSID)
	} else {
		form.Set("From", c.cfg.From)
	}
	if c.cfg.StatusCallback != "" {
		form.Set("StatusCallback", c.cfg.StatusCallback)
	}
	if !d.ExpiresAt.IsZero() {
		// Rounded down: the period must end by the expiry, never after.
		left := d.ExpiresAt.Sub(c.ep.Now())
		switch {
		case left < time.Second:
			return provider.Result{}, provider.Expired(c.Name(), left)
		case left < MaxValidity:
			form.Set("ValidityPeriod", strconv.FormatInt(int64(left/time.Second), 10))
		}
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

// classify reads a Messages response: a 2xx is accepted (Twilio answers 201
// only when it queued the message, so one without a readable sid, or whose
// body broke off, is still a send; see Result.MessageID); an error's code
// decides by codes, and its status otherwise.
func classify(name string, resp provider.Response, now time.Time, token string) (provider.Result, error) {
	var r response
	// A body that is not the documented JSON leaves r empty, and the status
	// alone decides.
	_ = json.Unmarshal(resp.Body, &r)
	if resp.Status >= 200 && resp.Status < 300 {
		return provider.Result{MessageID: r.SID, HTTPStatus: resp.Status}, nil
	}
	e := provider.StatusError(name, resp, now)
	if r.Code != 0 {
		e.Code = strconv.Itoa(r.Code)
	}
	if r.Message != "" {
		e.Message = provider.Redact(r.Message, token)
	}
	if rl, ok := codes[r.Code]; ok {
		rl.Apply(e)
	}
	if r.Code == 14107 && e.RetryAfter == 0 {
		e.RetryAfter = pairLimitWait
	}
	return provider.Result{}, e
}
