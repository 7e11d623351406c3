package providers

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
)

// testSecret is a signing secret of webhook.MinSecretBytes bytes.
const testSecret = "whsec_" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3"

// load reads the environment the way the worker does. Tests using it call
// t.Setenv and so cannot run in parallel.
func load(t *testing.T, env map[string]string) (Router, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var cfg Config
	if err := config.Process("OWED", &cfg); err != nil {
		t.Fatal(err)
	}
	return New(cfg)
}

func TestDefaultIsSandboxForEverything(t *testing.T) {
	r, err := load(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := r.For(payload.ChannelEmail)
	for _, ch := range payload.Channels() {
		s, err := r.For(ch)
		if err != nil || s != first || s.Name() != "sandbox" {
			t.Fatalf("%s: %v %v", ch, s, err)
		}
	}
}

func TestEveryProviderFromTheEnvironment(t *testing.T) {
	r, err := load(t, map[string]string{
		"OWED_PROVIDER":              "sandbox",
		"OWED_PROVIDER_EMAIL":        "sendgrid",
		"OWED_SENDGRID_API_KEY":      "SG.key",
		"OWED_SENDGRID_FROM":         "owed@example.com",
		"OWED_PROVIDER_SMS":          "twilio",
		"OWED_TWILIO_ACCOUNT_SID":    "AC123",
		"OWED_TWILIO_AUTH_TOKEN":     "tok",
		"OWED_TWILIO_FROM":           "+15550001111",
		"OWED_PROVIDER_TELEGRAM":     "telegram",
		"OWED_TELEGRAM_TOKEN":        "1:abc",
		"OWED_PROVIDER_SLACK":        "slack",
		"OWED_SLACK_TOKEN":           "xoxb-1",
		"OWED_PROVIDER_WEBHOOK":      "webhook",
		"OWED_WEBHOOK_URL":           "https://hooks.example.com/owed",
		"OWED_WEBHOOK_SECRET":        testSecret,
		"OWED_PROVIDER_TIMEOUT":      "3s",
		"OWED_TELEGRAM_BASE_URL":     "http://127.0.0.1:1",
		"OWED_POSTMARK_SERVER_TOKEN": "unused because postmark is not selected",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		payload.ChannelEmail: "sendgrid:owed@example.com", payload.ChannelSMS: "twilio:AC123",
		payload.ChannelTelegram: "telegram", payload.ChannelSlack: "slack",
		payload.ChannelWebhook: "webhook:hooks.example.com",
	}
	got := r.Assignments()
	for ch, name := range want {
		if got[ch] != name {
			t.Errorf("%s: %q, want %q", ch, got[ch], name)
		}
	}
}

func TestPostmarkAndNone(t *testing.T) {
	r, err := load(t, map[string]string{
		"OWED_PROVIDER":              "none",
		"OWED_PROVIDER_EMAIL":        "Postmark",
		"OWED_POSTMARK_SERVER_TOKEN": "pm",
		"OWED_POSTMARK_FROM":         "owed@example.com",
	})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := r.For(payload.ChannelEmail); err != nil || s.Name() != "postmark:owed@example.com" {
		t.Fatalf("email: %v %v", s, err)
	}
	_, err = r.For(payload.ChannelSMS)
	if !errors.Is(err, ErrNoProvider) || !strings.Contains(err.Error(), "OWED_PROVIDER_SMS") {
		t.Fatalf("disabled channel: %v", err)
	}
	if _, err := r.For("pigeon"); !errors.Is(err, ErrNoProvider) {
		t.Fatalf("unknown channel: %v", err)
	}
	if r.Assignments()[payload.ChannelSMS] != None {
		t.Fatalf("assignments %v", r.Assignments())
	}
}

// TestPlainHTTPOnlyForLoopback: a webhook over http:// carries recipients
// and content in the clear, so it may reach this machine only. The sandbox,
// a local test server, keeps plain http to any host (a compose network).
func TestPlainHTTPOnlyForLoopback(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:8089/hook", "http://localhost/hook", "http://[::1]:9/hook", "https://hooks.example.com"} {
		if _, err := load(t, map[string]string{"OWED_PROVIDER_WEBHOOK": "webhook", "OWED_WEBHOOK_URL": u,
			"OWED_WEBHOOK_SECRET": testSecret}); err != nil {
			t.Errorf("OWED_WEBHOOK_URL=%s: %v", u, err)
		}
	}
	if _, err := load(t, map[string]string{"OWED_SANDBOX_URL": "http://sandbox:8089", "OWED_SANDBOX_SECRET": testSecret}); err != nil {
		t.Errorf("the sandbox on a compose network: %v", err)
	}
}

func TestErrorsNameTheVariable(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"unknown provider", map[string]string{"OWED_PROVIDER": "carrier-pigeon"},
			[]string{"OWED_PROVIDER:", `"carrier-pigeon"`, "sandbox, webhook, telegram, twilio, sendgrid, postmark, slack, none"}},
		{"unknown override", map[string]string{"OWED_PROVIDER_SMS": "twillio"},
			[]string{"OWED_PROVIDER_SMS:", `"twillio"`}},
		{"provider cannot carry a channel", map[string]string{"OWED_PROVIDER": "twilio"},
			[]string{"OWED_PROVIDER=twilio cannot carry the email channel", "OWED_PROVIDER_EMAIL", "sendgrid, postmark"}},
		{"override cannot carry its channel", map[string]string{"OWED_PROVIDER_SMS": "slack"},
			[]string{"OWED_PROVIDER_SMS=slack cannot carry the sms channel"}},
		{"missing credentials", map[string]string{"OWED_PROVIDER_SMS": "twilio"},
			[]string{"OWED_TWILIO_ACCOUNT_SID"}},
		{"webhook without secret", map[string]string{"OWED_PROVIDER_WEBHOOK": "webhook", "OWED_WEBHOOK_URL": "https://x"},
			[]string{"OWED_WEBHOOK_SECRET"}},
		{"bad sandbox secret", map[string]string{"OWED_SANDBOX_SECRET": "whsec_not-base64!"},
			[]string{"OWED_SANDBOX_SECRET"}},
		{"negative timeout", map[string]string{"OWED_PROVIDER_TIMEOUT": "-1s"},
			[]string{"OWED_PROVIDER_TIMEOUT"}},
		{"bad sandbox url", map[string]string{"OWED_SANDBOX_URL": "localhost:8089"},
			[]string{"OWED_SANDBOX_URL"}},
		// "secret", 6 bytes: a key an offline guess reaches.
		{"short webhook secret", map[string]string{"OWED_PROVIDER_WEBHOOK": "webhook", "OWED_WEBHOOK_URL": "https://x",
			"OWED_WEBHOOK_SECRET": "whsec_c2VjcmV0"}, []string{"OWED_WEBHOOK_SECRET", "6 bytes", "at least 24"}},
		// 23 bytes: one short.
		{"webhook secret one byte short", map[string]string{"OWED_PROVIDER_WEBHOOK": "webhook", "OWED_WEBHOOK_URL": "https://x",
			"OWED_WEBHOOK_SECRET": "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY="}, []string{"OWED_WEBHOOK_SECRET", "23 bytes"}},
		{"short sandbox secret", map[string]string{"OWED_SANDBOX_SECRET": "whsec_c2VjcmV0"}, []string{"OWED_SANDBOX_SECRET"}},
		{"plain http to another host", map[string]string{"OWED_PROVIDER_WEBHOOK": "webhook",
			"OWED_WEBHOOK_URL": "http://hooks.example.com/owed", "OWED_WEBHOOK_SECRET": testSecret},
			[]string{"OWED_WEBHOOK_URL", "loopback", "https"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.env)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "not-base64!") {
				t.Errorf("error leaks the secret: %v", err)
			}
		})
	}
}

// Each provider's default pace is its published limit (rates.go cites the
// pages); a provider publishing none, and an account the Router did not
// build, are unpaced.
func TestDefaultRates(t *testing.T) {
	want := map[string]pace.Rate{
		Telegram: {Count: 30, Per: time.Second}, Slack: {Count: 1, Per: time.Second},
		Twilio: {Count: 1, Per: time.Second}, SendGrid: pace.Unlimited, Postmark: pace.Unlimited,
		Webhook: pace.Unlimited, Sandbox: pace.Unlimited, None: pace.Unlimited,
	}
	for _, name := range providerNames {
		if got := DefaultRate(name); got != want[name] {
			t.Errorf("DefaultRate(%s) = %s, want %s", name, got, want[name])
		}
	}
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.For("email")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.DefaultRate(s.Name()); !got.IsUnlimited() {
		t.Errorf("sandbox account %s: default %s, want unlimited", s.Name(), got)
	}
	if got := r.DefaultRate("telegram"); !got.IsUnlimited() {
		t.Errorf("an account the Router did not build: %s, want unlimited", got)
	}
}

// OWED_PROVIDER_RATES paces named providers over OWED_PROVIDER_RATE and
// the defaults, and names an unknown provider in its error.
func TestProviderRatesWinOverTheSettingAndTheDefaults(t *testing.T) {
	r := Routing{Rates: map[string]pace.Rate{Twilio: {Count: 3, Per: time.Second}, Webhook: pace.Unlimited}}
	set := pace.RateSetting{Rate: pace.Rate{Count: 40, Per: time.Second}, Set: true}
	for _, c := range []struct {
		provider string
		setting  pace.RateSetting
		want     pace.Rate
	}{
		{Twilio, set, pace.Rate{Count: 3, Per: time.Second}},
		{Webhook, set, pace.Unlimited},
		{Telegram, set, pace.Rate{Count: 40, Per: time.Second}},
		{Telegram, pace.RateSetting{}, pace.Rate{Count: 30, Per: time.Second}},
	} {
		if got := r.Rate(c.provider, c.setting); got != c.want {
			t.Errorf("Rate(%s, %s) = %s, want %s", c.provider, c.setting, got, c.want)
		}
	}
	r.Rates["fax"] = pace.Unlimited
	if _, err := r.Providers(); err == nil || !strings.Contains(err.Error(), `OWED_PROVIDER_RATES: unknown provider "fax"`) {
		t.Errorf("Providers() with a rate for fax: %v, want it refused by name", err)
	}
}
