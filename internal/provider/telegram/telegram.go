// Package telegram is the Telegram Bot API adapter: sendMessage to a chat id.
//
// The bot token is part of the request path, so no error this package returns
// may contain the request URL; every transport error is stripped of it and the
// token is redacted from anything the API echoes. The Bot API has no
// idempotency key, so a retry after a lost response can post twice.
package telegram

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/provider"
)

// DefaultBaseURL is the Bot API's address.
const DefaultBaseURL = "https://api.telegram.org"

// Name is the Sender name: one bot is one rate limit.
const Name = "telegram"

// Config configures the adapter; with the OWED_TELEGRAM prefix the variables
// are OWED_TELEGRAM_TOKEN and OWED_TELEGRAM_BASE_URL.
type Config struct {
	// Token is the bot token from @BotFather ("123456:ABC-DEF…").
	Token string `envconfig:"TOKEN"`
	// BaseURL overrides DefaultBaseURL, for a fake server in tests.
	BaseURL string `envconfig:"BASE_URL"`
	// Timeout bounds one send; provider.DefaultTimeout when zero.
	Timeout time.Duration `ignored:"true"`
	// Clock dates Retry-After answers; clock.Real when nil.
	Clock clock.Clock `ignored:"true"`
}

// Client sends Telegram messages.
type Client struct {
	token string
	ep    *provider.Endpoint
}

var _ provider.Sender = (*Client)(nil)

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.Token == "" {
		return nil, fmt.Errorf("OWED_TELEGRAM_TOKEN: required (the bot token from @BotFather)")
	}
	if strings.ContainsAny(cfg.Token, "/?# ") {
		return nil, fmt.Errorf("OWED_TELEGRAM_TOKEN: must not contain '/', '?', '#' or spaces (it goes in the URL path)")
	}
	base, err := provider.BaseURL("OWED_TELEGRAM_BASE_URL", cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	return &Client{token: cfg.Token,
		ep: provider.NewEndpoint(Name, base+"/bot"+cfg.Token+"/sendMessage", cfg.Timeout, cfg.Clock, cfg.Token)}, nil
}

// Name returns the provider account the client sends as.
func (c *Client) Name() string { return Name }

type request struct {
	ChatID    string `json:"chat_id"`
	Text      string `json:"text"`
	ParseMode string `json:"parse_mode,omitempty"`
}

// Send posts d's text to the chat whose id is d.Recipient. Message.Extras
// "parse_mode" (MarkdownV2, HTML) is passed through.
func (c *Client) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	r := request{ChatID: d.Recipient, Text: d.Content.Text, ParseMode: d.Content.Extras["parse_mode"]}
	return c.ep.PostJSON(ctx, r, nil, func(resp provider.Response, now time.Time) (provider.Result, error) {
		return classify(resp, d.Recipient, now, c.token)
	})
}

// response is the Bot API's envelope for every method.
type response struct {
	OK          bool   `json:"ok"`
	ErrorCode   int    `json:"error_code"`
	Description string `json:"description"`
	Result      struct {
		MessageID int64 `json:"message_id"`
	} `json:"result"`
	Parameters struct {
		RetryAfter int64 `json:"retry_after"`
	} `json:"parameters"`
}

// recipient400 are the fragments of a 400's description that say the chat,
// not the message, is what failed. The Bot API documents only error_code and
// description (https://core.telegram.org/bots/api#making-requests); the
// descriptions are those collected at https://github.com/TelegramBotAPI/errors.
var recipient400 = []string{
	"chat not found",
	"user not found",
	"peer_id_invalid",
	"group chat was upgraded", // the chat moved to parameters.migrate_to_chat_id
	"group chat was deactivated",
	"not enough rights to send",
	"have no rights to send",
}

// chatLimit says a 429 is the chat's limit, not the bot's. The Bot API's
// answer does not say which limit was hit (error_code 429 and
// parameters.retry_after either way), but its FAQ names two: about 30
// messages a second across chats for the bot, and one a second within a
// chat (20 a minute in a group), past which "you'll begin receiving 429
// errors" (https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this).
// owed paces the bot below the first (providers' default rate, 30/s), so a
// 429 is the chat's: only that chat waits, and the bot's other chats go on.
// Should the bot's own limit be hit after all (another process on the same
// token, a pace set too high), the worker sees several chats limited at
// once and pauses the whole account (docs/pace.md, "Per-recipient limits").
const chatLimit = true

// classify reads a sendMessage response. ok:true is accepted, with the
// message id "<chat id>:<message_id>" because Telegram numbers messages per
// chat. 401 (a revoked token) and 404 (the token names no bot) are Account;
// 429 is RateLimited after parameters.retry_after seconds, scoped to the
// chat (chatLimit); 403 (the bot was
// blocked or kicked, the user deactivated) and a 400 naming the chat are the
// recipient's Permanent failure; other 400s (bad markup, an empty or too long
// text) are Permanent; 5xx are Transient. A 200 that is not ok:true says
// nothing about the send (Unreadable).
func classify(resp provider.Response, chatID string, now time.Time, token string) (provider.Result, error) {
	var r response
	decodeErr := json.Unmarshal(resp.Body, &r)
	if resp.Status == http.StatusOK {
		if decodeErr != nil || !r.OK || resp.Truncated {
			return provider.Result{}, provider.Unreadable(Name, resp, "sendMessage")
		}
		res := provider.Result{HTTPStatus: resp.Status}
		if r.Result.MessageID != 0 {
			res.MessageID = chatID + ":" + strconv.FormatInt(r.Result.MessageID, 10)
		}
		return res, nil
	}
	e := provider.StatusError(Name, resp, now)
	if r.ErrorCode != 0 {
		e.Code = strconv.Itoa(r.ErrorCode)
	}
	if r.Description != "" {
		e.Message = provider.Redact(r.Description, token)
	}
	switch code := cmp.Or(r.ErrorCode, resp.Status); {
	case code == http.StatusTooManyRequests:
		e.Reclassify(provider.RateLimited, chatLimit)
		if r.Parameters.RetryAfter > 0 {
			e.RetryAfter = time.Duration(min(r.Parameters.RetryAfter, int64(provider.MaxRetryAfter/time.Second))) * time.Second
		}
	case code == http.StatusUnauthorized, code == http.StatusNotFound:
		e.Reclassify(provider.Account, false)
	case code == http.StatusForbidden:
		e.Reclassify(provider.Permanent, true)
	case code == http.StatusBadRequest:
		d := strings.ToLower(r.Description)
		e.Reclassify(provider.Permanent, slices.ContainsFunc(recipient400, func(s string) bool { return strings.Contains(d, s) }))
	}
	return provider.Result{}, e
}
