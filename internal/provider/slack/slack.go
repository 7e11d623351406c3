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

// errorRules are chat.postMessage's documented errors
// (https://docs.slack.dev/reference/methods/chat.postMessage#errors) that
// mean more than "retry". Any other ok:false error is Transient: Slack
// answered, so the message was not posted, and a retry is safe.
var errorRules = map[string]provider.Rule{
	// The token cannot post anywhere: pause the account.
	"not_authed":              {Class: provider.Account},
	"invalid_auth":            {Class: provider.Account},
	"account_inactive":        {Class: provider.Account},
	"token_revoked":           {Class: provider.Account},
	"token_expired":           {Class: provider.Account},
	"no_permission":           {Class: provider.Account},
	"missing_scope":           {Class: provider.Account},
	"not_allowed_token_type":  {Class: provider.Account},
	"ekm_access_denied":       {Class: provider.Account},
	"team_access_not_granted": {Class: provider.Account},
	// The channel is gone or closed to the bot: the recipient's failure.
	"channel_not_found":                   {Class: provider.Permanent, Recipient: true},
	"not_in_channel":                      {Class: provider.Permanent, Recipient: true},
	"is_archived":                         {Class: provider.Permanent, Recipient: true},
	"restricted_action":                   {Class: provider.Permanent, Recipient: true},
	"restricted_action_read_only_channel": {Class: provider.Permanent, Recipient: true},
	// The message itself is rejected.
	"msg_too_long":          {Class: provider.Permanent},
	"no_text":               {Class: provider.Permanent},
	"invalid_blocks":        {Class: provider.Permanent},
	"invalid_blocks_format": {Class: provider.Permanent},
	"too_many_attachments":  {Class: provider.Permanent},
	"invalid_arguments":     {Class: provider.Permanent},
	"invalid_charset":       {Class: provider.Permanent},
	// Slack's own pace, scoped to the channel (channelLimit).
	"rate_limited": {Class: provider.RateLimited, Recipient: channelLimit},
	"ratelimited":  {Class: provider.RateLimited, Recipient: channelLimit},
	// "It's possible some aspect of the operation succeeded before the error
	// was raised."
	"internal_error": {Class: provider.Transient, MaybeSent: true},
	"fatal_error":    {Class: provider.Transient, MaybeSent: true},
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

// channelLimit says a rate limit on chat.postMessage is the channel's, not
// the workspace's. Slack's answer does not say which (a 429, or ok:false
// "ratelimited", with Retry-After either way), but the method's special
// tier names both: "one message per second per channel, while also
// maintaining a workspace-wide limit" of several hundred a minute
// (https://docs.slack.dev/apis/web-api/rate-limits, and
// https://docs.slack.dev/reference/methods/chat.postMessage#rate-limiting).
// owed paces the bot below the workspace's (providers' default rate), so a
// limit is the channel's: only that channel waits, and the bot's other
// channels go on. Should the workspace's be hit after all, the worker sees
// several channels limited at once and pauses the whole account
// (docs/pace.md, "Per-recipient limits").
const channelLimit = true

// classify reads a chat.postMessage response. 200 with ok:true is accepted,
// with the id "<channel>:<ts>" (ts is unique only within a channel). ok:false
// is classified by errorRules (RateLimited after Retry-After), Transient
// otherwise; a 200 that is neither says nothing about the send (Unreadable).
// HTTP 429 is RateLimited after Retry-After, scoped to the channel; other
// statuses follow provider.StatusError.
func classify(resp provider.Response, now time.Time, token string) (provider.Result, error) {
	var r response
	decodeErr := json.Unmarshal(resp.Body, &r)
	if resp.Status != http.StatusOK {
		e := provider.StatusError(Name, resp, now)
		if r.Error != "" {
			e.Code = provider.Redact(r.Error, token)
		}
		if e.Class == provider.RateLimited {
			e.Recipient = channelLimit
		}
		return provider.Result{}, e
	}
	if decodeErr != nil || resp.Truncated || (!r.OK && r.Error == "") {
		// Slack answers failures with 200 too, so a 200 that is not the
		// documented JSON may or may not be a send.
		return provider.Result{}, provider.Unreadable(Name, resp, "chat.postMessage")
	}
	if r.OK {
		res := provider.Result{HTTPStatus: resp.Status}
		if r.TS != "" {
			res.MessageID = r.Channel + ":" + r.TS
		}
		return res, nil
	}
	e := provider.NewError(Name, provider.Transient, resp.Status, provider.Redact(r.Error, token), "chat.postMessage failed")
	if rl, ok := errorRules[r.Error]; ok {
		rl.Apply(e)
	}
	if e.Class == provider.RateLimited {
		if d, ok := provider.ParseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
			e.RetryAfter = d
		}
	}
	return provider.Result{}, e
}
