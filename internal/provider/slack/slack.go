// Package slack is the Slack adapter: chat.postMessage to a channel id with
// a bot token.
//
// Slack answers most failures with HTTP 200 and ok:false, so the body, not
// the status, decides the class. Slack has no idempotency key for
// chat.postMessage; the token never appears in an error.
package slack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/provider"
)

// DefaultBaseURL is Slack's Web API host.
const DefaultBaseURL = "https://slack.com"

// Name is the Sender name: Slack rate-limits per workspace and token, and
// owed runs one token.
const Name = "slack"

// permanentErrors are chat.postMessage errors that no retry fixes: the
// channel is gone or closed to the bot, or the token is dead.
var permanentErrors = map[string]bool{
	"channel_not_found": true,
	"not_in_channel":    true,
	"is_archived":       true,
	"invalid_auth":      true,
	"account_inactive":  true,
	"token_revoked":     true,
	"msg_too_long":      true,
	"no_text":           true,
	"restricted_action": true,
}

// Config configures the adapter; with the OWED_SLACK prefix the variables
// are OWED_SLACK_TOKEN and OWED_SLACK_BASE_URL.
type Config struct {
	// Token is a bot token ("xoxb-…") with chat:write.
	Token string `envconfig:"TOKEN"`
	// BaseURL overrides DefaultBaseURL, for a fake server in tests.
	BaseURL string `envconfig:"BASE_URL"`
	// Timeout bounds one send; provider.DefaultTimeout when zero.
	Timeout time.Duration `ignored:"true"`
	// Clock dates Retry-After answers; clock.Real when nil.
	Clock clock.Clock `ignored:"true"`
}

// Client posts Slack messages.
type Client struct {
	token string
	ep    *provider.Endpoint
}

var _ provider.Sender = (*Client)(nil)

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.Token == "" {
		return nil, fmt.Errorf("OWED_SLACK_TOKEN: required (a bot token with chat:write)")
	}
	base, err := provider.BaseURL("OWED_SLACK_BASE_URL", cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	return &Client{token: cfg.Token,
		ep: provider.NewEndpoint(Name, base+"/api/chat.postMessage", cfg.Timeout, cfg.Clock, cfg.Token)}, nil
}

// Name returns the provider account the client sends as.
func (c *Client) Name() string { return Name }

type request struct {
	Channel string `json:"channel"`
	Text    string `json:"text"`
}

// Send posts d's text to the channel whose id is d.Recipient.
func (c *Client) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	return c.ep.PostJSON(ctx, request{Channel: d.Recipient, Text: d.Content.Text}, func(req *http.Request) {
		// Slack warns unless the charset is explicit.
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("Authorization", "Bearer "+c.token)
	}, func(resp provider.Response, now time.Time) (provider.Result, error) {
		return classify(resp, now, c.token)
	})
}

type response struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error"`
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

// classify reads a chat.postMessage response. 200 with ok:true is accepted,
// with the id "<channel>:<ts>" (ts is unique only within a channel). ok:false
// is RateLimited for "ratelimited", Permanent for the errors in
// permanentErrors and Transient otherwise. HTTP 429 is RateLimited after
// Retry-After; other statuses follow provider.StatusClass.
func classify(resp provider.Response, now time.Time, token string) (provider.Result, error) {
	var r response
	decodeErr := json.Unmarshal(resp.Body, &r)
	if resp.Status != http.StatusOK {
		e := provider.StatusError(Name, resp, now)
		if r.Error != "" {
			e.Code = provider.Redact(r.Error, token)
		}
		return provider.Result{}, e
	}
	if decodeErr == nil && r.OK {
		res := provider.Result{HTTPStatus: resp.Status}
		if r.TS != "" {
			res.MessageID = r.Channel + ":" + r.TS
		}
		return res, nil
	}
	e := provider.NewError(Name, provider.Transient, resp.Status, provider.Redact(r.Error, token), "chat.postMessage failed")
	switch {
	case decodeErr != nil:
		// Slack answers failures with 200 too, so an unreadable 200 may or
		// may not be a send; it is retried.
		e.Message = "unreadable chat.postMessage response"
	case r.Error == "ratelimited":
		e.Class = provider.RateLimited
		if d, ok := provider.ParseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
			e.RetryAfter = d
		}
	case permanentErrors[r.Error]:
		e.Class = provider.Permanent
	}
	return provider.Result{}, e
}
