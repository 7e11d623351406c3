package sweeper

import (
	"fmt"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/console"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/materialise"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider/providers"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/receipt"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/sweep"
)

// Defaults of the sweeper's own settings. The sweep's are sweep.*Default,
// the log level's service.LogLevelDefault.
const (
	ListenAddrDefault = ":8080"
	DBMaxConnsDefault = 10
	// ShutdownMarginDefault is what the shutdown grace adds to the sweep
	// budget when OWED_SHUTDOWN_GRACE is not set: the run's last publish and
	// mark, and writing its answer, happen after the budget's check.
	ShutdownMarginDefault = 10 * time.Second
)

// Config is the sweeper service's configuration, read from OWED_*
// variables. Every field is documented in the README's configuration table.
// The fields carry no envconfig default tags: a variable that is not set
// keeps the value Defaults gave it, so the constants are the one source.
type Config struct {
	DatabaseURL string `envconfig:"DATABASE_URL"`
	ListenAddr  string `envconfig:"LISTEN_ADDR"`
	LogLevel    string `envconfig:"LOG_LEVEL"`
	// CronSecret authenticates the hosted cron's calls to /cron/*.
	CronSecret string `envconfig:"CRON_SECRET"`
	// APIToken is the optional service token for a trusted backend.
	APIToken   string `envconfig:"API_TOKEN"`
	DBMaxConns int    `envconfig:"DB_MAX_CONNS"`
	// APIMaxExpandedBytes bounds the bytes of rows one API request stands
	// for (api.Options.MaxExpandedBytes; zero is its default).
	APIMaxExpandedBytes int64 `envconfig:"API_MAX_EXPANDED_BYTES"`
	// APITenantRate, APITenantRowsPerMinute and APITenantLimits bound each
	// tenant's API requests and scheduled rows (api.Limits; 0 is no limit).
	APITenantRate          float64            `envconfig:"API_TENANT_RATE"`
	APITenantRowsPerMinute int64              `envconfig:"API_TENANT_ROWS_PER_MINUTE"`
	APITenantLimits        api.LimitOverrides `envconfig:"API_TENANT_LIMITS"`
	// ShutdownGrace is how long SIGTERM lets in-flight requests finish
	// before their connections are closed; zero is SweepBudget +
	// ShutdownMarginDefault, so a sweep under way is never cut off.
	ShutdownGrace time.Duration `envconfig:"SHUTDOWN_GRACE"`

	SweepBatch          int           `envconfig:"SWEEP_BATCH"`
	SweepBudget         time.Duration `envconfig:"SWEEP_BUDGET"`
	SweepRequeueBatch   int           `envconfig:"SWEEP_REQUEUE_BATCH"`
	SweepMaxOutstanding int           `envconfig:"SWEEP_MAX_OUTSTANDING"`
	// QueueDepth is how much of each provider account's sending the sweep
	// keeps published (sweep.Config.QueueDepth).
	QueueDepth        time.Duration `envconfig:"QUEUE_DEPTH"`
	PublishAhead      time.Duration `envconfig:"PUBLISH_AHEAD"`
	RequeueAfter      time.Duration `envconfig:"REQUEUE_AFTER"`
	IdempotencyPrefix string        `envconfig:"IDEMPOTENCY_PREFIX"`
	// The workers' routing (OWED_PROVIDER, OWED_PROVIDER_<CHANNEL>) and pace
	// (OWED_PROVIDER_RATE), read here too, so the sweep knows the provider
	// accounts it shares capacity between and how fast each sends (Accounts).
	providers.Routing
	ProviderRate pace.RateSetting `envconfig:"PROVIDER_RATE"`
	// DefaultGrace and DefaultGraceOverrides are the expiry of a row
	// scheduled without one (ledger.Grace): New stores them, and the
	// database applies them to every writer's rows.
	DefaultGrace          ledger.Grace          `envconfig:"DEFAULT_GRACE"`
	DefaultGraceOverrides ledger.GraceOverrides `envconfig:"DEFAULT_GRACE_OVERRIDES"`

	// ConsoleToken is the operator console's token (OWED_CONSOLE_TOKEN);
	// ConsoleTrustedHeader the reverse proxy's header that names an
	// authenticated operator (OWED_CONSOLE_TRUSTED_HEADER, honoured only
	// when set). With neither the console answers 404 (internal/console).
	ConsoleToken         string `envconfig:"CONSOLE_TOKEN"`
	ConsoleTrustedHeader string `envconfig:"CONSOLE_TRUSTED_HEADER"`
	// OperatorDatabaseURL is the console's own login, a member of
	// owed_operator (OWED_OPERATOR_DATABASE_URL): holding an account,
	// pausing a tenant and writing the audit trail are that role's alone,
	// never the services'. Unset, the console's pages work and those
	// actions are refused by the database.
	OperatorDatabaseURL string `envconfig:"OPERATOR_DATABASE_URL"`
	// ReadDatabaseURL is a streaming replica the console's pages that only
	// read (the dashboard, the notification pages) query instead of the
	// primary (OWED_READ_DATABASE_URL): what they show is as old as the
	// replica's lag (docs/scale.md). Unset: the primary.
	ReadDatabaseURL string `envconfig:"READ_DATABASE_URL"`

	NotifyConfig
	// Receipt configures the providers' status callbacks, OWED_RECEIPT_*
	// (internal/receipt): each endpoint is served only with its secret.
	Receipt     receipt.Config     `ignored:"true"`
	Materialise materialise.Config `ignored:"true"`
	// Queue is the queue backend, OWED_QUEUE_BACKEND and its variables.
	Queue backends.Config `ignored:"true"`
}

// Defaults returns the configuration with every default applied and nothing
// read from the environment.
func Defaults() Config {
	return Config{ListenAddr: ListenAddrDefault, LogLevel: service.LogLevelDefault, DBMaxConns: DBMaxConnsDefault,
		APIMaxExpandedBytes: api.MaxExpandedBytesDefault,
		APITenantRate:       api.TenantRateDefault, APITenantRowsPerMinute: api.TenantRowsPerMinuteDefault,
		SweepBatch: sweep.BatchDefault, SweepBudget: sweep.BudgetDefault, SweepRequeueBatch: sweep.RequeueBatchDefault,
		SweepMaxOutstanding: sweep.MaxOutstandingDefault, QueueDepth: sweep.QueueDepthDefault,
		PublishAhead: sweep.PublishAheadDefault, RequeueAfter: sweep.RequeueAfterDefault,
		IdempotencyPrefix: sweep.KeyPrefixDefault, DefaultGrace: ledger.Grace{D: ledger.GraceDefault},
		NotifyConfig: NotifyConfig{SweepOnNotify: SweepOnNotifyDefault, SweepNotifyRate: NotifyRateDefault}}
}

// LoadConfig reads the environment over Defaults. Errors name the variable.
func LoadConfig() (Config, error) {
	c := Defaults()
	if err := config.Process("OWED", &c); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	if err := config.Process("OWED", &c.Materialise); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	if err := config.Process("OWED", &c.Receipt); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	var err error
	if c.Queue, err = backends.LoadConfig(); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Basics returns the settings service.Start needs.
func (c Config) Basics() service.Basics {
	return service.Basics{LogLevel: c.LogLevel, DatabaseURL: c.DatabaseURL, DBMaxConns: c.DBMaxConns,
		ListenAddr: c.ListenAddr}
}

// UsageDefaults says what OWED_SHUTDOWN_GRACE is when it is not set
// (config.UsageDefaulter): Grace's rule, and what it makes of c's budget.
func (c Config) UsageDefaults() map[string]string {
	d := map[string]string{"OWED_SHUTDOWN_GRACE": fmt.Sprintf("OWED_SWEEP_BUDGET+%s (%s)", ShutdownMarginDefault, c.Grace())}
	// The workers' routing, read here too, defaults as the workers' does.
	p := providers.Config{Routing: c.Routing}.UsageDefaults()
	d["OWED_PROVIDER"] = p["OWED_PROVIDER"]
	for _, ch := range payload.Channels() {
		k := "OWED_PROVIDER_" + strings.ToUpper(ch)
		d[k] = p[k]
	}
	return d
}

// Grace is the shutdown grace: ShutdownGrace, or the sweep budget plus
// ShutdownMarginDefault when it is not set.
func (c Config) Grace() time.Duration {
	if c.ShutdownGrace > 0 {
		return c.ShutdownGrace
	}
	return c.SweepBudget + ShutdownMarginDefault
}

// Sweep returns the sweep settings.
func (c Config) Sweep() sweep.Config {
	accounts, _ := c.Accounts()
	return sweep.Config{Batch: c.SweepBatch, Budget: c.SweepBudget, PublishAhead: c.PublishAhead,
		RequeueAfter: c.RequeueAfter, RequeueBatch: c.SweepRequeueBatch, MaxOutstanding: c.SweepMaxOutstanding,
		QueueDepth: c.QueueDepth, Accounts: accounts, KeyPrefix: c.IdempotencyPrefix}
}

// Accounts are the provider accounts the workers send through, as the
// workers' routing and pace say: the channels routed to one provider share
// its account (providers.Routing.Providers), paced as the workers pace it
// (providers.Routing.Rate: OWED_PROVIDER_RATES, OWED_PROVIDER_RATE, the
// provider's default). The default
// provider's account is first, so it carries any channel no account lists,
// as OWED_PROVIDER carries every channel without an override.
func (c Config) Accounts() ([]sweep.Account, error) {
	names, err := c.Routing.Providers()
	if err != nil {
		return nil, err
	}
	def := strings.ToLower(strings.TrimSpace(c.Provider))
	if def == "" {
		def = providers.DefaultProvider
	}
	accounts := []sweep.Account{{Name: def}}
	at := map[string]int{def: 0}
	for _, ch := range payload.Channels() {
		name := names[ch]
		if name == providers.None {
			continue
		}
		i, ok := at[name]
		if !ok {
			i, at[name] = len(accounts), len(accounts)
			accounts = append(accounts, sweep.Account{Name: name})
		}
		accounts[i].Channels = append(accounts[i].Channels, ch)
	}
	for i := range accounts {
		accounts[i].Rate = c.Routing.Rate(accounts[i].Name, c.ProviderRate)
	}
	return accounts, nil
}

// APILimits returns the API's default per-tenant limits.
func (c Config) APILimits() api.Limits {
	return api.Limits{Rate: c.APITenantRate, RowsPerMinute: c.APITenantRowsPerMinute}
}

// Validate names the first unusable setting.
func (c Config) Validate() error {
	switch {
	case c.DatabaseURL == "":
		return fmt.Errorf("OWED_DATABASE_URL is not set: give a postgres:// URL for the application role")
	case len(c.CronSecret) < 16:
		return fmt.Errorf("OWED_CRON_SECRET must be set to at least 16 characters: the hosted cron sends it as a bearer token")
	case c.APIToken != "" && len(c.APIToken) < 16:
		return fmt.Errorf("OWED_API_TOKEN must be at least 16 characters when set")
	case c.ConsoleToken != "" && len(c.ConsoleToken) < console.MinTokenLength:
		return fmt.Errorf("OWED_CONSOLE_TOKEN must be at least %d characters when set", console.MinTokenLength)
	case c.DBMaxConns <= 0:
		return fmt.Errorf("OWED_DB_MAX_CONNS=%d must be above zero", c.DBMaxConns)
	case c.ShutdownGrace < 0 || (c.ShutdownGrace > 0 && c.ShutdownGrace <= c.SweepBudget):
		return fmt.Errorf("OWED_SHUTDOWN_GRACE=%s must be longer than OWED_SWEEP_BUDGET=%s, so a sweep under way at SIGTERM "+
			"can finish; leave it unset for the budget plus %s", c.ShutdownGrace, c.SweepBudget, ShutdownMarginDefault)
	case c.APIMaxExpandedBytes != 0 && c.APIMaxExpandedBytes < payload.MaxPayloadBytes:
		return fmt.Errorf("OWED_API_MAX_EXPANDED_BYTES=%d must be at least %d, one row's largest payload",
			c.APIMaxExpandedBytes, payload.MaxPayloadBytes)
	}
	if err := c.NotifyConfig.Validate(); err != nil {
		return err
	}
	if err := c.APILimits().Validate(); err != nil {
		return err
	}
	if err := c.Receipt.Validate(); err != nil {
		return err
	}
	if _, err := c.Accounts(); err != nil {
		return err
	}
	if err := c.Sweep().Validate(); err != nil {
		return err
	}
	if err := c.Materialise.Validate(); err != nil {
		return err
	}
	return c.Queue.Validate()
}
