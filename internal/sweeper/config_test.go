package sweeper

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/materialise"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/jetstream"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/sqs"
	"github.com/owedhq/owed/internal/receipt"
	"github.com/owedhq/owed/internal/sweep"
)

// clearEnv unsets every variable LoadConfig reads, for this test only.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, spec := range []any{&Config{}, &materialise.Config{}, &receipt.Config{}, &backends.Config{}, &rest.Config{}, &sqs.Config{},
		&jetstream.Config{}} {
		var buf bytes.Buffer
		if err := envconfig.Usagef("OWED", spec, &buf, "{{range .}}{{.Key}}\n{{end}}"); err != nil {
			t.Fatal(err)
		}
		for _, k := range strings.Fields(buf.String()) {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

// minimalEnv clears every variable LoadConfig reads and sets the few it
// requires, for this test only.
func minimalEnv(t *testing.T) {
	t.Helper()
	clearEnv(t)
	t.Setenv("OWED_DATABASE_URL", "postgres://owed_app@db/owed")
	t.Setenv("OWED_CRON_SECRET", secret)
	t.Setenv("OWED_QUEUE_URL", "http://127.0.0.1:8181")
	t.Setenv("OWED_QUEUE_TOKEN", "dev-token")
}

func TestLoadConfigAppliesTheDefaultsAndTheEnvironmentOverIt(t *testing.T) {
	minimalEnv(t)
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	if c.ListenAddr != want.ListenAddr || c.LogLevel != want.LogLevel || c.DBMaxConns != want.DBMaxConns ||
		!reflect.DeepEqual(c.Sweep(), want.Sweep()) || !c.SweepOnNotify {
		t.Errorf("LoadConfig() = %+v, want the defaults %+v", c, want)
	}

	if c.SweepNotifyRate != NotifyRateDefault {
		t.Errorf("SweepNotifyRate = %v, want %v", c.SweepNotifyRate, NotifyRateDefault)
	}
	for _, bad := range []string{"-1", "NaN", "+Inf"} {
		t.Setenv("OWED_SWEEP_NOTIFY_RATE", bad)
		if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_SWEEP_NOTIFY_RATE") {
			t.Errorf("OWED_SWEEP_NOTIFY_RATE=%s: %v, want an error naming it", bad, err)
		}
	}
	t.Setenv("OWED_SWEEP_NOTIFY_RATE", "")
	os.Unsetenv("OWED_SWEEP_NOTIFY_RATE")

	t.Setenv("OWED_SWEEP_BATCH", "7")
	t.Setenv("OWED_LISTEN_ADDR", ":9999")
	t.Setenv("OWED_SWEEP_ON_NOTIFY", "false")
	if c, err = LoadConfig(); err != nil || c.SweepBatch != 7 || c.ListenAddr != ":9999" || c.SweepOnNotify {
		t.Errorf("LoadConfig() = %+v, %v; want the variables over the defaults", c, err)
	}
}

// The sweep shares capacity between the provider accounts the workers'
// routing names: channels routed to one provider share its account, paced
// at the provider's default unless OWED_PROVIDER_RATE is set, and the
// default provider's account comes first (it carries any other channel).
func TestAccountsFollowTheWorkersRouting(t *testing.T) {
	clearEnv(t)
	t.Setenv("OWED_DATABASE_URL", "postgres://owed_app@db/owed")
	t.Setenv("OWED_CRON_SECRET", secret)
	t.Setenv("OWED_QUEUE_URL", "http://127.0.0.1:8181")
	t.Setenv("OWED_QUEUE_TOKEN", "dev-token")
	t.Setenv("OWED_PROVIDER", "webhook")
	t.Setenv("OWED_PROVIDER_SMS", "twilio")
	t.Setenv("OWED_PROVIDER_TELEGRAM", "telegram")
	t.Setenv("OWED_PROVIDER_SLACK", "none")
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	got := c.Sweep().Accounts
	want := []sweep.Account{
		{Name: "webhook", Channels: []string{"email", "webhook"}, Rate: pace.Unlimited},
		{Name: "twilio", Channels: []string{"sms"}, Rate: pace.Rate{Count: 1, Per: time.Second}},
		{Name: "telegram", Channels: []string{"telegram"}, Rate: pace.Rate{Count: 30, Per: time.Second}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("accounts = %+v, want %+v", got, want)
	}
	t.Setenv("OWED_PROVIDER_RATE", "40/s")
	if c, err = LoadConfig(); err != nil {
		t.Fatal(err)
	}
	for _, a := range c.Sweep().Accounts {
		if a.Rate != (pace.Rate{Count: 40, Per: time.Second}) {
			t.Errorf("with OWED_PROVIDER_RATE=40/s, account %s is paced %s", a.Name, a.Rate)
		}
	}
	t.Setenv("OWED_PROVIDER_SMS", "sendgrid")
	if _, err = LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_PROVIDER_SMS") {
		t.Errorf("OWED_PROVIDER_SMS=sendgrid: %v, want it refused by name", err)
	}
}

// TestConfigHasNoDefaultTags keeps Defaults the one source: a default tag
// would be a second one that envconfig applies instead.
func TestConfigHasNoDefaultTags(t *testing.T) {
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Tag.Get("default") != "" {
			t.Errorf("Config.%s has a default tag; set its default in Defaults from a constant", f.Name)
		}
	}
}

// The per-tenant API limits: defaults, the overrides list, and a bad value
// of each stopping the start with the variable's name.
func TestAPITenantLimitsConfig(t *testing.T) {
	minimalEnv(t)
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.Limits{Rate: api.TenantRateDefault, RowsPerMinute: api.TenantRowsPerMinuteDefault}); c.APILimits() != want ||
		len(c.APITenantLimits) != 0 {
		t.Errorf("limits %+v and overrides %v, want the defaults %+v and none", c.APILimits(), c.APITenantLimits, want)
	}
	t.Setenv("OWED_API_TENANT_RATE", "0")
	t.Setenv("OWED_API_TENANT_ROWS_PER_MINUTE", "5000")
	t.Setenv("OWED_API_TENANT_LIMITS", "acme:rate=50,rows=100000;globex:rows=0")
	if c, err = LoadConfig(); err != nil || c.APILimits() != (api.Limits{RowsPerMinute: 5000}) ||
		c.APITenantLimits.String() != "acme:rate=50,rows=100000;globex:rows=0" {
		t.Errorf("LoadConfig() = %+v %v, %v; want no request limit, 5000 rows and the two overrides",
			c.APILimits(), c.APITenantLimits, err)
	}
	for name, value := range map[string]string{
		"OWED_API_TENANT_RATE":            "NaN",
		"OWED_API_TENANT_ROWS_PER_MINUTE": "10",
		"OWED_API_TENANT_LIMITS":          "acme:rate=fast",
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: error %v, want one naming the variable", name, value, err)
			}
		})
	}
}
