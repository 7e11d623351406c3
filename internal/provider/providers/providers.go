// Package providers picks the Sender for each channel from the environment.
// It is the only place that knows every adapter; the worker asks a Router for
// a channel's Sender and never names a provider itself.
//
// A channel no configured provider can carry fails New at start-up, with the
// variable to set, rather than failing its first send.
package providers

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/postmark"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/provider/sendgrid"
	"github.com/owedhq/owed/internal/provider/slack"
	"github.com/owedhq/owed/internal/provider/telegram"
	"github.com/owedhq/owed/internal/provider/twilio"
	"github.com/owedhq/owed/internal/provider/webhook"
)

// Provider names accepted by OWED_PROVIDER and its per-channel overrides.
const (
	Sandbox  = "sandbox"
	Webhook  = "webhook"
	Telegram = "telegram"
	Twilio   = "twilio"
	SendGrid = "sendgrid"
	Postmark = "postmark"
	Slack    = "slack"
	// None disables a channel: a send on it fails with ErrNoProvider.
	None = "none"
)

// DefaultProvider carries every channel unless configured otherwise, so a
// fresh checkout never sends to a real recipient.
const DefaultProvider = Sandbox

// DefaultSandboxURL is the sandbox's default listen address as a URL.
const DefaultSandboxURL = "http://" + sandbox.DefaultAddr

// providerNames lists every accepted name in the order errors show them.
var providerNames = []string{Sandbox, Webhook, Telegram, Twilio, SendGrid, Postmark, Slack, None}

// carries says which providers can carry each channel. The sandbox and the
// generic webhook carry anything: the receiver decides what a channel means.
var carries = map[string][]string{
	payload.ChannelEmail:    {Sandbox, Webhook, SendGrid, Postmark, None},
	payload.ChannelSMS:      {Sandbox, Webhook, Twilio, None},
	payload.ChannelTelegram: {Sandbox, Webhook, Telegram, None},
	payload.ChannelSlack:    {Sandbox, Webhook, Slack, None},
	payload.ChannelWebhook:  {Sandbox, Webhook, None},
}

// Config is read with config.Process("OWED", &cfg); every variable is
// listed in docs/providers.md.
type Config struct {
	Routing
	// Timeout bounds one send for every adapter; provider.DefaultTimeout
	// when zero.
	Timeout time.Duration `envconfig:"PROVIDER_TIMEOUT"`

	// SandboxURL is where the sandbox listens; DefaultSandboxURL when empty.
	SandboxURL string `envconfig:"SANDBOX_URL"`
	// SandboxSecret signs requests to the sandbox; it must match the
	// sandbox's own OWED_SANDBOX_SECRET. Empty sends unsigned.
	SandboxSecret string `envconfig:"SANDBOX_SECRET"`

	Webhook  webhook.Config  `envconfig:"WEBHOOK"`
	Telegram telegram.Config `envconfig:"TELEGRAM"`
	Twilio   twilio.Config   `envconfig:"TWILIO"`
	SendGrid sendgrid.Config `envconfig:"SENDGRID"`
	Postmark postmark.Config `envconfig:"POSTMARK"`
	Slack    slack.Config    `envconfig:"SLACK"`
}

// UsageDefaults says what the variables New and the adapters give a
// default when they are empty are then (config.UsageDefaulter), for
// `worker --help`.
func (c Config) UsageDefaults() map[string]string {
	d := map[string]string{
		"OWED_PROVIDER":                DefaultProvider,
		"OWED_PROVIDER_TIMEOUT":        provider.DefaultTimeout.String(),
		"OWED_SANDBOX_URL":             DefaultSandboxURL,
		"OWED_TELEGRAM_BASE_URL":       telegram.DefaultBaseURL,
		"OWED_TWILIO_BASE_URL":         twilio.DefaultBaseURL,
		"OWED_SENDGRID_BASE_URL":       sendgrid.DefaultBaseURL,
		"OWED_POSTMARK_BASE_URL":       postmark.DefaultBaseURL,
		"OWED_POSTMARK_MESSAGE_STREAM": postmark.DefaultMessageStream,
		"OWED_SLACK_BASE_URL":          slack.DefaultBaseURL,
	}
	for _, ch := range payload.Channels() {
		d["OWED_PROVIDER_"+strings.ToUpper(ch)] = "OWED_PROVIDER"
	}
	var paced []string
	for _, name := range providerNames {
		if r := DefaultRate(name); !r.IsUnlimited() {
			paced = append(paced, name+" "+r.String())
		}
	}
	d["OWED_PROVIDER_RATE"] = "each provider's: " + strings.Join(paced, ", ") + ", the others unpaced"
	return d
}

// Routing says which provider carries each channel: the part of Config
// the sweeper reads too (it shares its capacity between the accounts the
// workers send through), without any credential.
type Routing struct {
	// Provider carries every channel without an override; DefaultProvider
	// when empty.
	Provider         string `envconfig:"PROVIDER"`
	ProviderEmail    string `envconfig:"PROVIDER_EMAIL"`
	ProviderSMS      string `envconfig:"PROVIDER_SMS"`
	ProviderTelegram string `envconfig:"PROVIDER_TELEGRAM"`
	ProviderSlack    string `envconfig:"PROVIDER_SLACK"`
	ProviderWebhook  string `envconfig:"PROVIDER_WEBHOOK"`
	// Rates paces named providers' accounts (OWED_PROVIDER_RATES,
	// "provider:rate,…", e.g. "twilio:3/s,webhook:unlimited"), over
	// OWED_PROVIDER_RATE and the providers' defaults (Rate).
	Rates map[string]pace.Rate `envconfig:"PROVIDER_RATES"`
}

// Rate is the pace of the named provider's account: its entry in Rates,
// else setting (OWED_PROVIDER_RATE) when set, else the provider's default
// (DefaultRate).
func (r Routing) Rate(provider string, setting pace.RateSetting) pace.Rate {
	if rate, ok := r.Rates[provider]; ok {
		return rate
	}
	return setting.For(DefaultRate)(provider)
}

// Providers resolves each channel's provider name (None for a disabled
// channel), checking that the provider can carry the channel. Channels
// sharing a provider share its one Sender, and so its account and pace.
func (r Routing) Providers() (map[string]string, error) {
	def := r.Provider
	if def == "" {
		def = DefaultProvider
	}
	overrides := map[string]string{
		payload.ChannelEmail: r.ProviderEmail, payload.ChannelSMS: r.ProviderSMS,
		payload.ChannelTelegram: r.ProviderTelegram, payload.ChannelSlack: r.ProviderSlack,
		payload.ChannelWebhook: r.ProviderWebhook,
	}
	for name := range r.Rates {
		if name == None || !slices.Contains(providerNames, name) {
			return nil, fmt.Errorf("OWED_PROVIDER_RATES: unknown provider %q; accepted: %s", name,
				strings.Join(slices.DeleteFunc(slices.Clone(providerNames), func(n string) bool { return n == None }), ", "))
		}
	}
	out := map[string]string{}
	for _, ch := range payload.Channels() {
		name, variable := def, "OWED_PROVIDER"
		if o := overrides[ch]; o != "" {
			name, variable = o, "OWED_PROVIDER_"+strings.ToUpper(ch)
		}
		name = strings.ToLower(strings.TrimSpace(name))
		if !slices.Contains(providerNames, name) {
			return nil, fmt.Errorf("%s: unknown provider %q; accepted: %s", variable, name, strings.Join(providerNames, ", "))
		}
		if !slices.Contains(carries[ch], name) {
			return nil, fmt.Errorf("%s=%s cannot carry the %s channel; set OWED_PROVIDER_%s to one of %s",
				variable, name, ch, strings.ToUpper(ch), strings.Join(carries[ch], ", "))
		}
		out[ch] = name
	}
	return out, nil
}

// ErrNoProvider is returned by Router.For for a channel configured "none" or
// not known at all.
var ErrNoProvider = errors.New("no provider for channel")

// Router maps a channel to its Sender. Channels sharing a provider share one
// Sender, and so one Name and one pace.
type Router struct {
	routing Routing
	senders map[string]provider.Sender
	// providerOf maps each Sender's Name (its account) to the provider
	// name it was built as, for DefaultRate.
	providerOf map[string]string
}

// For returns the Sender for channel, or an error wrapping ErrNoProvider.
func (r Router) For(channel string) (provider.Sender, error) {
	s, ok := r.senders[channel]
	if !ok || s == nil {
		return nil, fmt.Errorf("%w %q (set OWED_PROVIDER_%s)", ErrNoProvider, channel, strings.ToUpper(channel))
	}
	return s, nil
}

// Assignments returns each channel's Sender name ("none" when disabled), for
// the start-up log line.
func (r Router) Assignments() map[string]string {
	out := make(map[string]string, len(r.senders))
	for ch, s := range r.senders {
		if s == nil {
			out[ch] = None
		} else {
			out[ch] = s.Name()
		}
	}
	return out
}

// New builds the Router: it resolves each channel's provider, checks that
// the provider can carry the channel, and builds each provider used once.
func New(cfg Config) (Router, error) {
	if cfg.Timeout < 0 {
		return Router{}, fmt.Errorf("OWED_PROVIDER_TIMEOUT: must be a positive duration like 10s (got %s)", cfg.Timeout)
	}
	names, err := cfg.Providers()
	if err != nil {
		return Router{}, err
	}
	built := map[string]provider.Sender{}
	r := Router{routing: cfg.Routing, senders: map[string]provider.Sender{}, providerOf: map[string]string{}}
	for _, ch := range payload.Channels() {
		name := names[ch]
		if name == None {
			r.senders[ch] = nil
			continue
		}
		s, ok := built[name]
		if !ok {
			var err error
			if s, err = build(name, cfg); err != nil {
				return Router{}, fmt.Errorf("provider %s (for the %s channel): %w", name, ch, err)
			}
			built[name] = s
			r.providerOf[s.Name()] = name
		}
		r.senders[ch] = s
	}
	return r, nil
}

// build makes the named provider's Sender. Every adapter takes the one
// OWED_PROVIDER_TIMEOUT, which is why their own Timeout fields are not read
// from the environment.
func build(name string, cfg Config) (provider.Sender, error) {
	cfg.Webhook.Timeout, cfg.Telegram.Timeout, cfg.Twilio.Timeout = cfg.Timeout, cfg.Timeout, cfg.Timeout
	cfg.SendGrid.Timeout, cfg.Postmark.Timeout, cfg.Slack.Timeout = cfg.Timeout, cfg.Timeout, cfg.Timeout
	switch name {
	case Sandbox:
		url := cfg.SandboxURL
		if url == "" {
			url = DefaultSandboxURL
		}
		return webhook.New(webhook.Config{URL: url, Secret: cfg.SandboxSecret, Name: Sandbox,
			EnvPrefix: "OWED_SANDBOX", Timeout: cfg.Timeout, AllowHTTP: true})
	case Webhook:
		if cfg.Webhook.Secret == "" {
			return nil, fmt.Errorf(`OWED_WEBHOOK_SECRET: required, "whsec_" followed by base64; receivers verify the signature`)
		}
		return webhook.New(cfg.Webhook)
	case Telegram:
		return telegram.New(cfg.Telegram)
	case Twilio:
		return twilio.New(cfg.Twilio)
	case SendGrid:
		return sendgrid.New(cfg.SendGrid)
	case Postmark:
		return postmark.New(cfg.Postmark)
	case Slack:
		return slack.New(cfg.Slack)
	}
	// New checked the name against providerNames; reaching here means a
	// name was added there without an adapter here.
	return nil, fmt.Errorf("provider %q has no adapter", name)
}
