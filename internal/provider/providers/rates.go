package providers

import (
	"time"

	"github.com/owedhq/owed/internal/pace"
)

// defaultRates is each provider account's pace when OWED_PROVIDER_RATE is
// empty, from the provider's published limits (docs/pace.md "Default
// rates" repeats this table with the same sources). A provider that
// publishes no sending limit is unpaced: its 429s still pause every worker
// on the account through the shared pause (pace.Limiter.Pause).
var defaultRates = map[string]pace.Rate{
	// "If you're sending bulk notifications to multiple users, the API will
	// not allow more than 30 messages per second or so."
	// https://core.telegram.org/bots/faq#broadcasting-to-users
	Telegram: {Count: 30, Per: time.Second},
	// chat.postMessage "generally allows posting one message per second per
	// channel, while also maintaining a workspace-wide limit".
	// https://api.slack.com/docs/rate-limits (Special Tier; "Posting
	// messages: 1 per second"). owed's Slack account is one bot token for
	// every channel and the workspace-wide number is not published, so the
	// account keeps the one figure Slack does publish: 1/s.
	Slack: {Count: 1, Per: time.Second},
	// "Your Twilio SMS-enabled long code phone numbers can send SMS messages
	// at a rate of one message segment per second" (toll-free: 3, short
	// code: 30). https://www.twilio.com/help/faq/sms/how-quickly-can-i-send-sms-messages
	// Twilio queues what is sent faster rather than refusing it, so a faster
	// pace only moves the backlog into Twilio's queue, out of reach of the
	// row's expiry. 1/s is the conservative default of a single US long
	// code; a Messaging Service with a number pool, a toll-free number or a
	// short code sends faster: set OWED_PROVIDER_RATE.
	Twilio: {Count: 1, Per: time.Second},
	// The v3 mail/send endpoint is excluded from SendGrid's 600
	// requests/minute API limit and has no published rate of its own
	// (https://www.twilio.com/en-us/changelog/imposing-rate-limits-on-some-sendgrid-v2-api-endpoints,
	// https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/rate-limits):
	// unpaced.
	SendGrid: pace.Unlimited,
	// Postmark documents a 429 but publishes no numeric API sending limit
	// (https://postmarkapp.com/developer/api/overview): unpaced.
	Postmark: pace.Unlimited,
	// The generic webhook's receiver is the operator's own, and the sandbox
	// is a test double whose limit is whatever the test gives it: unpaced.
	Webhook: pace.Unlimited,
	Sandbox: pace.Unlimited,
}

// DefaultRate is the named provider's pace when OWED_PROVIDER_RATE is
// empty (see defaultRates); pace.Unlimited for a name it does not know.
func DefaultRate(provider string) pace.Rate { return defaultRates[provider] }

// DefaultRate is the default pace of the provider account a Sender of this
// Router names (Sender.Name(), the worker's pace key): its provider's
// DefaultRate, or pace.Unlimited for an account this Router did not build.
func (r Router) DefaultRate(account string) pace.Rate { return DefaultRate(r.providerOf[account]) }

// Rates returns each account's pace for the worker's limiters: the pace of
// the provider a Sender of this Router names (Routing.Rate), with setting
// as OWED_PROVIDER_RATE.
func (r Router) Rates(setting pace.RateSetting) func(account string) pace.Rate {
	return func(account string) pace.Rate { return r.routing.Rate(r.providerOf[account], setting) }
}
