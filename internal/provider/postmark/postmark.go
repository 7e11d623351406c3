// Package postmark is the Postmark email adapter: one email per delivery
// through POST /email.
//
// Postmark has no idempotency key; the row's key travels in Metadata so a
// duplicate can be recognised in Postmark's activity. The server token never
// appears in an error.
package postmark

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/provider"
)

// DefaultBaseURL is Postmark's API.
const DefaultBaseURL = "https://api.postmarkapp.com"

// DefaultMessageStream is the transactional stream every server has.
const DefaultMessageStream = "outbound"

// codes are the Postmark API ErrorCodes a send answers with, from
// https://postmarkapp.com/developer/api/overview#error-codes. A code not
// listed is classified by its HTTP status (422 Permanent, 401 Account, 5xx
// Transient).
var codes = map[int]provider.Rule{
	10:  {Class: provider.Account},                    // bad or missing server token
	100: {Class: provider.Transient},                  // maintenance
	300: {Class: provider.Permanent, Recipient: true}, // invalid email request: the To address is not a valid email address
	400: {Class: provider.Account},                    // sender signature not found: no From of this server can send
	401: {Class: provider.Account},                    // sender signature not confirmed
	402: {Class: provider.Permanent},                  // invalid JSON
	403: {Class: provider.Permanent},                  // incompatible JSON
	405: {Class: provider.Account},                    // not allowed to send: the account ran out of credits
	406: {Class: provider.Permanent, Recipient: true}, // inactive recipient: it bounced or marked a message as spam
	409: {Class: provider.Permanent},                  // JSON required
	412: {Class: provider.Account},                    // the account is pending approval
	429: {Class: provider.RateLimited},                // rate limit exceeded
}

// Config configures the adapter; with the OWED_POSTMARK prefix the variables
// are OWED_POSTMARK_SERVER_TOKEN, OWED_POSTMARK_FROM,
// OWED_POSTMARK_MESSAGE_STREAM and OWED_POSTMARK_BASE_URL.
type Config struct {
	ServerToken string `envconfig:"SERVER_TOKEN"`
	// From is a confirmed sender signature, optionally "Name <addr>".
	From string `envconfig:"FROM"`
	// MessageStream is DefaultMessageStream when empty.
	MessageStream string `envconfig:"MESSAGE_STREAM"`
	// BaseURL overrides DefaultBaseURL, for a fake server in tests.
	BaseURL string `envconfig:"BASE_URL"`
	// Timeout bounds one send; provider.DefaultTimeout when zero.
	Timeout time.Duration `ignored:"true"`
	// Clock dates Retry-After answers; clock.Real when nil.
	Clock clock.Clock `ignored:"true"`
}

// Client sends email through one Postmark server.
type Client struct {
	cfg Config
	ep  *provider.Endpoint
}

var _ provider.Sender = (*Client)(nil)

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.ServerToken == "" {
		return nil, fmt.Errorf("OWED_POSTMARK_SERVER_TOKEN: required (the server's API token)")
	}
	if !strings.Contains(cfg.From, "@") {
		return nil, fmt.Errorf("OWED_POSTMARK_FROM: required, a confirmed sender signature (got %q)", cfg.From)
	}
	if cfg.MessageStream == "" {
		cfg.MessageStream = DefaultMessageStream
	}
	base, err := provider.BaseURL("OWED_POSTMARK_BASE_URL", cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	c.ep = provider.NewEndpoint(c.Name(), base+"/email", cfg.Timeout, cfg.Clock, cfg.ServerToken)
	return c, nil
}

// Name is "postmark:<sender>"; the token is secret and a sender belongs to
// one server.
func (c *Client) Name() string { return "postmark:" + c.cfg.From }

type request struct {
	From          string            `json:"From"`
	To            string            `json:"To"`
	Subject       string            `json:"Subject"`
	TextBody      string            `json:"TextBody,omitempty"`
	HTMLBody      string            `json:"HtmlBody,omitempty"`
	Tag           string            `json:"Tag,omitempty"`
	MessageStream string            `json:"MessageStream"`
	Metadata      map[string]string `json:"Metadata,omitempty"`
}

// Send emails d to the address d.Recipient; the kind becomes the Tag.
func (c *Client) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	r := request{
		From: c.cfg.From, To: d.Recipient, Subject: d.Content.Subject,
		TextBody: d.Content.Text, HTMLBody: d.Content.HTML, Tag: d.Kind, MessageStream: c.cfg.MessageStream,
		Metadata: map[string]string{
			"owed_idempotency_key": d.IdempotencyKey,
			"owed_notification_id": strconv.FormatInt(d.NotificationID, 10),
			"owed_tenant":          d.Tenant,
		},
	}
	return c.ep.PostJSON(ctx, r, func(req *http.Request) {
		req.Header.Set("X-Postmark-Server-Token", c.cfg.ServerToken)
	}, func(resp provider.Response, now time.Time) (provider.Result, error) {
		return classify(c.Name(), resp, now, c.cfg.ServerToken)
	})
}

type response struct {
	MessageID string `json:"MessageID"`
	ErrorCode int    `json:"ErrorCode"`
	Message   string `json:"Message"`
}

// classify reads a /email response: a 200 with ErrorCode 0 is accepted
// (Postmark answers errors with 4xx, so a 2xx without a readable MessageID,
// or whose body broke off, is still a send; see Result.MessageID); an
// ErrorCode decides by codes, and the HTTP status otherwise.
func classify(name string, resp provider.Response, now time.Time, token string) (provider.Result, error) {
	var r response
	// A body that is not the documented JSON leaves r empty, and the status
	// alone decides.
	_ = json.Unmarshal(resp.Body, &r)
	if resp.Status >= 200 && resp.Status < 300 && r.ErrorCode == 0 {
		return provider.Result{MessageID: r.MessageID, HTTPStatus: resp.Status}, nil
	}
	e := provider.StatusError(name, resp, now)
	if r.ErrorCode != 0 {
		e.Code = strconv.Itoa(r.ErrorCode)
	}
	if r.Message != "" {
		e.Message = provider.Redact(r.Message, token)
	}
	if resp.Status >= 200 && resp.Status < 300 {
		// A 2xx carrying an ErrorCode is not documented; a rejection that
		// names a code is about the request, so it is not retried.
		e.Reclassify(provider.Permanent, false)
	}
	if rl, ok := codes[r.ErrorCode]; ok {
		rl.Apply(e)
	}
	return provider.Result{}, e
}
