// Package provider is the one interface between owed and every delivery
// channel: a Sender takes one rendered notification to one recipient and
// either returns the provider's message id or a classified *Error.
//
// The classification is the contract the worker schedules by: RateLimited is a
// schedule (wait RetryAfter, do not burn an attempt), Transient is retried with
// backoff, Permanent settles the row failed, Account pauses the whole provider
// account. Error.Recipient and Error.MaybeSent refine them; each adapter's
// table of what its provider's codes mean is in docs/providers.md, checked
// against the table its tests run. A Sender never retries by itself,
// never sleeps on a Retry-After, and never puts a credential in an error.
// Adapters live in one subpackage each (webhook, telegram, twilio, sendgrid,
// postmark, slack); the sandbox subpackage is a local provider for tests and
// drills, and providers picks an adapter per channel from the environment.
// What adapters share lives here: the HTTP client, the bounded read, the
// status classification, and ParseRetryAfter, which is internal/retryafter's
// one reading of the header at the provider cap MaxRetryAfter.
package provider

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/payload"
)

// Sender delivers one notification through one provider account.
type Sender interface {
	// Send delivers d once. A nil error means the provider accepted the
	// message; any error is classified (see Classify).
	Send(ctx context.Context, d Delivery) (Result, error)
	// Name is the provider account ("sandbox", "sendgrid:acct"). Workers
	// sharing a name share one pace, because they share one rate limit.
	Name() string
}

// Delivery is one notification on its way to one recipient.
type Delivery struct {
	Tenant         string
	NotificationID int64
	// Recipient is the resolved address: an email address, a phone number in
	// E.164, a Telegram chat id, a Slack channel id.
	Recipient string
	Channel   string
	Kind      string
	Content   payload.Content
	// IdempotencyKey is the same on every attempt of a row, so a provider that
	// honours it turns a retried send into a no-op.
	IdempotencyKey string
	// ExpiresAt is the row's expiry, zero when it has none. An adapter whose
	// provider can drop a message undelivered by then passes it on (Twilio's
	// ValidityPeriod), so a late message is not delivered late.
	ExpiresAt time.Time
}

// Result describes an accepted send.
type Result struct {
	// MessageID is the provider's id for the message, recorded on the row.
	// It is empty when the provider accepted the message but its answer
	// carried no readable id: the send happened, and retrying it to learn the
	// id would deliver it twice.
	MessageID  string
	HTTPStatus int
}

// Class says what the worker should do after a failed send.
type Class int

// The classes a failed send falls into. Transient is the zero value so that an
// Error built without a class is retried rather than dropped.
const (
	// Transient: retry with backoff; the send may succeed later.
	Transient Class = iota
	// RateLimited: the provider account, or with Error.Recipient the one
	// recipient, is over its limit. Wait RetryAfter, slow every worker
	// sharing the account (only that recipient's rows with Recipient), and
	// do not count an attempt.
	RateLimited
	// Permanent: the send will never succeed as it is (bad address, blocked
	// bot, rejected content). Settle the row failed.
	Permanent
	// Account: the provider account cannot send anything (an expired or
	// revoked credential, no credits, a suspended account, a missing scope).
	// Pause every send on the account, burn no attempt, page on-call; the
	// row goes back to the queue and is sent once the account is resumed.
	Account
)

func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case RateLimited:
		return "rate_limited"
	case Permanent:
		return "permanent"
	case Account:
		return "account"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// MaxMessageLen bounds Error.Message: it is stored on the ledger row and in
// the attempts table, and a provider's error page is not worth keeping whole.
const MaxMessageLen = 512

// Error is a classified send failure. Message is what the provider said,
// truncated and with the adapter's credentials redacted; it never contains a
// secret or a URL that embeds one.
type Error struct {
	// Provider is the Sender's Name.
	Provider string
	Class    Class
	// RetryAfter is how long the provider asked us to wait. It is set for
	// RateLimited (zero when the provider did not say, leaving the pace to the
	// caller) and for Transient when the server sent a Retry-After.
	RetryAfter time.Duration
	// HTTPStatus is the response status, zero when no response arrived.
	HTTPStatus int
	// Code is the provider's own error code ("21211", "channel_not_found").
	Code    string
	Message string
	// Recipient marks a failure that is the recipient's. On a Permanent
	// failure (opted out, blocked the bot, an invalid or inactive address)
	// it is recorded on the row with Code and is not paged, and the
	// recipient may be marked undeliverable. On a RateLimited one the
	// provider scoped the limit to this recipient (a Telegram chat's, a
	// Slack channel's, a pair of phone numbers'): only that recipient waits
	// RetryAfter, and the account's other recipients are not slowed.
	Recipient bool
	// MaybeSent says the request reached the provider and the answer does
	// not say whether the message was accepted (no response, a 5xx, an
	// unreadable 200): a retry is recorded as a possible duplicate.
	MaybeSent bool
	// err is the underlying cause (a context or network error), kept so that
	// errors.Is(err, context.Canceled) works on a classified error.
	err error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Provider != "" {
		b.WriteString(e.Provider)
		b.WriteString(": ")
	}
	b.WriteString(e.Class.String())
	if e.HTTPStatus != 0 {
		fmt.Fprintf(&b, " (HTTP %d", e.HTTPStatus)
		if e.Code != "" {
			fmt.Fprintf(&b, ", code %s", e.Code)
		}
		b.WriteString(")")
	} else if e.Code != "" {
		fmt.Fprintf(&b, " (code %s)", e.Code)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, ", retry after %s", e.RetryAfter)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Reclassify sets e's class from the provider's own code or body: Recipient
// is kept only for a Permanent or RateLimited failure, RetryAfter only where
// the worker waits on it (RateLimited, Transient), MaybeSent only for a
// Transient one. It returns e.
func (e *Error) Reclassify(class Class, recipient bool) *Error {
	e.Class, e.Recipient = class, recipient && (class == Permanent || class == RateLimited)
	if class != RateLimited && class != Transient {
		e.RetryAfter = 0
	}
	if class != Transient {
		e.MaybeSent = false
	}
	return e
}

// Rule is what one of a provider's own error codes means for owed: the class,
// whether the failure is the recipient's, and whether the provider says the
// message may have gone out anyway. Adapters keep a table of them, citing the
// provider's page.
type Rule struct {
	Class     Class
	Recipient bool
	MaybeSent bool
}

// Apply reclassifies e by r (see Reclassify); MaybeSent is kept from the
// status (a 5xx) or added by the rule, for a Transient failure only. It
// returns e.
func (r Rule) Apply(e *Error) *Error {
	e.Reclassify(r.Class, r.Recipient)
	e.MaybeSent = (e.MaybeSent || r.MaybeSent) && r.Class == Transient
	return e
}

// Unwrap returns the cause, if the failure had one below HTTP.
func (e *Error) Unwrap() error { return e.err }

// Classify returns err as a *Error. A *Error anywhere in the chain is returned
// as is; anything else (a context deadline, a network error, an adapter's
// unexpected failure) is Transient, because retrying an unknown failure is
// safe where dropping a notification is not. Classify(nil) is nil.
func Classify(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return &Error{Class: Transient, Message: truncate(err.Error()), err: err}
}

// IsRateLimited reports whether err is RateLimited and how long the provider
// asked to wait (zero when it did not say).
func IsRateLimited(err error) (time.Duration, bool) {
	pe := Classify(err)
	if pe == nil || pe.Class != RateLimited {
		return 0, false
	}
	return pe.RetryAfter, true
}

// IsAccount reports whether err says the provider account cannot send.
func IsAccount(err error) bool {
	pe := Classify(err)
	return pe != nil && pe.Class == Account
}

// IsPermanent reports whether err will fail again on every retry.
func IsPermanent(err error) bool {
	pe := Classify(err)
	return pe != nil && pe.Class == Permanent
}

// IsTransient reports whether err is worth retrying with backoff. Unclassified
// errors are transient.
func IsTransient(err error) bool {
	pe := Classify(err)
	return pe != nil && pe.Class == Transient
}

// TransportError classifies a failure below HTTP (dial, TLS, timeout, a
// cancelled context) as Transient. Go's *url.Error quotes the request URL,
// which for some providers (Telegram) contains the token, so only the inner
// cause is kept, and every secret is redacted from what remains.
func TransportError(name string, err error, secrets ...string) *Error {
	cause := err
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		cause = ue.Err
	}
	msg := cause.Error()
	var ne net.Error
	switch {
	case errors.Is(cause, context.DeadlineExceeded):
		msg = "request timed out: " + msg
	case errors.Is(cause, context.Canceled):
		msg = "request cancelled: " + msg
	case errors.As(cause, &ne) && ne.Timeout():
		msg = "request timed out: " + msg
	}
	return &Error{Provider: name, Class: Transient, Message: Redact(msg, secrets...), err: cause}
}

// ErrExpired is the cause of an Expired error: an adapter whose provider
// enforces the row's expiry (Twilio's ValidityPeriod, in whole seconds) was
// handed a delivery with less left than the provider can express, and sent
// nothing. errors.Is(err, ErrExpired) tells the worker to settle the row
// expired, as its own expiry check would have a moment later.
var ErrExpired = errors.New("the row expires before the provider could enforce its expiry; not sent")

// Expired is the error an adapter returns instead of sending a delivery that
// has too little of its validity left (see ErrExpired). It is Transient with
// Code "expired" and not MaybeSent, so a worker that does not know ErrExpired
// retries it and then finds the row expired.
func Expired(name string, left time.Duration) *Error {
	return &Error{Provider: name, Class: Transient, Code: "expired",
		Message: fmt.Sprintf("%s of the row's validity left: %v", left.Round(time.Millisecond), ErrExpired), err: ErrExpired}
}

// NewError builds a classified error, redacting secrets from the provider's
// message and truncating it to MaxMessageLen.
func NewError(name string, class Class, status int, code, msg string, secrets ...string) *Error {
	return &Error{Provider: name, Class: class, HTTPStatus: status, Code: code, Message: Redact(msg, secrets...)}
}

// Redact replaces every non-empty secret in s with "[redacted]" and truncates
// the result to MaxMessageLen.
func Redact(s string, secrets ...string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return truncate(s)
}

func truncate(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= MaxMessageLen {
		return s
	}
	// Cut on a rune boundary so the stored message stays valid UTF-8.
	cut := MaxMessageLen
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
