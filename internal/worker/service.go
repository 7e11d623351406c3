package worker

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider/providers"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/sweep"
)

// Defaults of the service's own settings; the ones it shares with Options
// are the Options defaults.
const (
	ListenAddrDefault = ":9090"
	LogLevelDefault   = "info"
	DBMaxConnsDefault = 20
	ResolverDefault   = "recipient"
	// SettleLingerMax bounds OWED_WORKER_SETTLE_LINGER: every accepted send
	// waits up to this long for its record and its ack, and a crash in the
	// wait resends it.
	SettleLingerMax = time.Second
)

// Config is the worker service's configuration, read from OWED_* variables
// and documented in the README's configuration table. Its defaults are the
// constants above and the Options defaults, applied by defaultConfig: the
// fields carry no envconfig default tags, so the two cannot drift.
type Config struct {
	DatabaseURL       string        `envconfig:"DATABASE_URL"`
	ListenAddr        string        `envconfig:"LISTEN_ADDR"`
	LogLevel          string        `envconfig:"LOG_LEVEL"`
	DBMaxConns        int           `envconfig:"DB_MAX_CONNS"`
	Concurrency       int           `envconfig:"WORKER_CONCURRENCY"`
	MaxAttempts       int           `envconfig:"MAX_ATTEMPTS"`
	ShutdownTimeout   time.Duration `envconfig:"SHUTDOWN_TIMEOUT"`
	SendTimeout       time.Duration `envconfig:"SEND_TIMEOUT"`
	VisibilityTimeout time.Duration `envconfig:"VISIBILITY_TIMEOUT"`
	RetryAfterMax     time.Duration `envconfig:"RETRY_AFTER_MAX"`
	// ProviderRate is the pace every worker sharing a provider account
	// keeps together ("40/m") on every account; "unlimited" or "0" turns
	// pacing off, and empty (unset) gives each account its provider's
	// default (providers.DefaultRate).
	ProviderRate ProviderRate `envconfig:"PROVIDER_RATE"`
	// Resolver is "recipient" (the recipient is the address) or "sql" (the
	// owed_contacts table).
	Resolver string `envconfig:"RESOLVER"`
	// IdempotencyPrefix starts every provider idempotency key; it must be
	// the sweeper's (OWED_IDEMPOTENCY_PREFIX is read by both), since the
	// worker derives each row's key itself (Options.KeyPrefix).
	IdempotencyPrefix string `envconfig:"IDEMPOTENCY_PREFIX"`
	// AccountPause is how long an account error pauses the provider
	// account before one worker probes it (Options.AccountPause).
	AccountPause time.Duration `envconfig:"PROVIDER_ACCOUNT_PAUSE"`
	// RetrySchedule is every channel's retry schedule unless its own
	// RETRY_SCHEDULE_<CHANNEL> is set; the webhook channel's default is
	// RetryScheduleWebhookDefault.
	RetrySchedule         Schedule `envconfig:"RETRY_SCHEDULE"`
	RetryScheduleEmail    Schedule `envconfig:"RETRY_SCHEDULE_EMAIL"`
	RetryScheduleSMS      Schedule `envconfig:"RETRY_SCHEDULE_SMS"`
	RetryScheduleTelegram Schedule `envconfig:"RETRY_SCHEDULE_TELEGRAM"`
	RetryScheduleSlack    Schedule `envconfig:"RETRY_SCHEDULE_SLACK"`
	RetryScheduleWebhook  Schedule `envconfig:"RETRY_SCHEDULE_WEBHOOK"`
	// RecipientRate<Channel> is the channel's per-recipient pace
	// (Options.RecipientRates): empty, or "unlimited", for none.
	RecipientRateEmail    pace.Rate `envconfig:"RECIPIENT_RATE_EMAIL"`
	RecipientRateSMS      pace.Rate `envconfig:"RECIPIENT_RATE_SMS"`
	RecipientRateTelegram pace.Rate `envconfig:"RECIPIENT_RATE_TELEGRAM"`
	RecipientRateSlack    pace.Rate `envconfig:"RECIPIENT_RATE_SLACK"`
	RecipientRateWebhook  pace.Rate `envconfig:"RECIPIENT_RATE_WEBHOOK"`
	// Undeliverable marks the addresses a provider refused as the
	// recipient's and skips later sends to them (Options.NoUndeliverable).
	Undeliverable bool `envconfig:"UNDELIVERABLE"`
	// StallAfter is how long the worker may make no progress while it has
	// work before /healthz answers 503 (Options.StallAfter).
	StallAfter time.Duration `envconfig:"WORKER_STALL_AFTER"`
	// QueueDelayMax is the longest a message is returned to the queue for
	// before its wait is handed to the ledger (Options.QueueDelayMax);
	// unset, the backend's default (backends.Config.QueueDelayMax).
	QueueDelayMax time.Duration `envconfig:"QUEUE_DELAY_MAX"`
	// SettleLinger is how long accepted sends wait for company before their
	// settle is committed (Options.SettleLinger).
	SettleLinger time.Duration `envconfig:"WORKER_SETTLE_LINGER"`
	// RequeueAfter is the sweeper's OWED_REQUEUE_AFTER, read here too: how
	// long a row whose message the worker returned to the queue may stay
	// unsettled past the end of its wait before the sweep publishes it
	// again (Options.RequeueAfter).
	RequeueAfter time.Duration `envconfig:"REQUEUE_AFTER"`

	// Queue is the queue backend, OWED_QUEUE_BACKEND and its variables.
	Queue     backends.Config  `ignored:"true"`
	Providers providers.Config `ignored:"true"`
}

// defaultConfig is the configuration before the environment is read.
// envconfig leaves a field alone when its variable is not set, so a set
// variable wins and an unusable one (OWED_WORKER_CONCURRENCY=0) still fails
// Validate instead of falling back to the default.
func defaultConfig() Config {
	return Config{ListenAddr: ListenAddrDefault, LogLevel: LogLevelDefault, DBMaxConns: DBMaxConnsDefault,
		Concurrency: ConcurrencyDefault, ShutdownTimeout: ShutdownTimeoutDefault,
		SendTimeout: SendTimeoutDefault, VisibilityTimeout: VisibilityTimeoutDefault,
		RetryAfterMax: RetryAfterMaxDefault, Resolver: ResolverDefault, IdempotencyPrefix: sweep.KeyPrefixDefault,
		AccountPause: pace.AccountPauseDefault, RetrySchedule: MustSchedule(RetryScheduleDefault),
		RetryScheduleWebhook: MustSchedule(RetryScheduleWebhookDefault), Undeliverable: true,
		StallAfter: StallAfterDefault, RequeueAfter: sweep.RequeueAfterDefault}
}

// LoadConfig reads the environment over defaultConfig; errors name the
// variable.
func LoadConfig() (Config, error) {
	c := defaultConfig()
	for _, target := range []any{&c, &c.Providers} {
		if err := config.Process("OWED", target); err != nil {
			return c, fmt.Errorf("configuration: %w", err)
		}
	}
	var err error
	if c.Queue, err = backends.LoadConfig(); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Validate names the first unusable setting.
func (c Config) Validate() error {
	switch {
	case c.DatabaseURL == "":
		return fmt.Errorf("OWED_DATABASE_URL is not set: give a postgres:// URL for the application role")
	case c.Concurrency < 1 || c.Concurrency > 1000:
		return fmt.Errorf("OWED_WORKER_CONCURRENCY=%d must be 1 to 1000", c.Concurrency)
	case c.MaxAttempts < 0:
		return fmt.Errorf("OWED_MAX_ATTEMPTS=%d must be at least 1, or unset for the retry schedule's length plus one", c.MaxAttempts)
	case c.AccountPause < time.Second || c.AccountPause > pace.MaxPause:
		return fmt.Errorf("OWED_PROVIDER_ACCOUNT_PAUSE=%s must be from 1s to %s", c.AccountPause, pace.MaxPause)
	case len(c.RetrySchedule) == 0:
		return fmt.Errorf("OWED_RETRY_SCHEDULE is empty: give the retry delays, like %s", RetryScheduleDefault)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("OWED_SHUTDOWN_TIMEOUT=%s must be above zero", c.ShutdownTimeout)
	case c.SendTimeout <= 0:
		return fmt.Errorf("OWED_SEND_TIMEOUT=%s must be above zero", c.SendTimeout)
	case c.VisibilityTimeout < 2*time.Second || c.VisibilityTimeout > queue.MaxVisibility:
		return fmt.Errorf("OWED_VISIBILITY_TIMEOUT=%s must be 2s to %s", c.VisibilityTimeout, queue.MaxVisibility)
	case c.RetryAfterMax <= 0:
		return fmt.Errorf("OWED_RETRY_AFTER_MAX=%s must be above zero", c.RetryAfterMax)
	case c.Resolver != "recipient" && c.Resolver != "sql":
		return fmt.Errorf("OWED_RESOLVER=%q is not one of recipient, sql", c.Resolver)
	case c.SettleLinger < 0 || c.SettleLinger > SettleLingerMax:
		return fmt.Errorf("OWED_WORKER_SETTLE_LINGER=%s must be from 0 to %s", c.SettleLinger, SettleLingerMax)
	case c.StallAfter < c.SendTimeout+stallMargin:
		return fmt.Errorf("OWED_WORKER_STALL_AFTER=%s must be at least OWED_SEND_TIMEOUT + %s (%s): a message's slowest legitimate path", c.StallAfter, stallMargin, c.SendTimeout+stallMargin)
	case c.QueueDelayMax != 0 && (c.QueueDelayMax < time.Second || c.QueueDelayMax > queue.MaxVisibility):
		return fmt.Errorf("OWED_QUEUE_DELAY_MAX=%s must be 1s to %s, or unset for the queue backend's default", c.QueueDelayMax, queue.MaxVisibility)
	case c.RequeueAfter <= 0:
		return fmt.Errorf("OWED_REQUEUE_AFTER=%s must be above zero", c.RequeueAfter)
	case c.DBMaxConns < 1:
		return fmt.Errorf("OWED_DB_MAX_CONNS=%d must be above zero", c.DBMaxConns)
	}
	if err := checkKeyPrefix(c.IdempotencyPrefix); err != nil {
		return err
	}
	return c.Queue.Validate()
}

// Options builds the worker's options from the configuration.
func (c Config) Options() Options {
	by := map[string]Schedule{}
	for ch, s := range map[string]Schedule{payload.ChannelEmail: c.RetryScheduleEmail, payload.ChannelSMS: c.RetryScheduleSMS,
		payload.ChannelTelegram: c.RetryScheduleTelegram, payload.ChannelSlack: c.RetryScheduleSlack,
		payload.ChannelWebhook: c.RetryScheduleWebhook} {
		if len(s) > 0 {
			by[ch] = s
		}
	}
	rates := map[string]pace.Rate{}
	for ch, r := range map[string]pace.Rate{payload.ChannelEmail: c.RecipientRateEmail, payload.ChannelSMS: c.RecipientRateSMS,
		payload.ChannelTelegram: c.RecipientRateTelegram, payload.ChannelSlack: c.RecipientRateSlack,
		payload.ChannelWebhook: c.RecipientRateWebhook} {
		if !r.IsUnlimited() {
			rates[ch] = r
		}
	}
	return Options{Concurrency: c.Concurrency, RecipientRates: rates, MaxAttempts: c.MaxAttempts, SendTimeout: c.SendTimeout,
		VisibilityTimeout: c.VisibilityTimeout, ShutdownTimeout: c.ShutdownTimeout, RetryAfterMax: c.RetryAfterMax,
		KeyPrefix: c.IdempotencyPrefix, AccountPause: c.AccountPause,
		Retries: Retries{Default: c.RetrySchedule, ByChannel: by}, NoUndeliverable: !c.Undeliverable,
		StallAfter: c.StallAfter, QueueDelayMax: cmp.Or(c.QueueDelayMax, c.Queue.QueueDelayMax()),
		SettleLinger: c.SettleLinger, RequeueAfter: c.RequeueAfter}
}

// ProviderRate is OWED_PROVIDER_RATE as read (pace.RateSetting): the
// sweeper reads the same setting.
type ProviderRate = pace.RateSetting

// Paces returns the pace of each provider account at the one rate r; see
// PacesFor.
func Paces(db *sql.DB, r pace.Rate) func(account string) Pacer {
	return PacesFor(db, func(string) pace.Rate { return r })
}

// PacesFor returns the pace of each provider account, one Limiter per account
// shared by every sender in this process.
func PacesFor(db *sql.DB, rateOf func(account string) pace.Rate) func(account string) Pacer {
	var mu sync.Mutex
	limiters := map[string]Pacer{}
	return func(account string) Pacer {
		mu.Lock()
		defer mu.Unlock()
		if p, ok := limiters[account]; ok {
			return p
		}
		l, err := pace.New(db, account, rateOf(account))
		if err != nil {
			// Only a provider Name() the pace cannot store gets here; every
			// Reserve then fails, so the rows wait visibly instead of
			// being sent unpaced.
			limiters[account] = errPacer{err}
		} else {
			limiters[account] = pacer{l}
		}
		return limiters[account]
	}
}

type errPacer struct{ err error }

func (p errPacer) Reserve(context.Context, time.Duration) (time.Duration, bool, error) {
	return 0, false, p.err
}
func (p errPacer) Pause(context.Context, time.Duration) error { return p.err }
func (p errPacer) Next(context.Context) (time.Duration, time.Duration, error) {
	return 0, 0, p.err
}

// pacer adapts a pace.Limiter to the Pacer the worker uses.
type pacer struct{ l *pace.Limiter }

func (p pacer) Reserve(ctx context.Context, maxWait time.Duration) (time.Duration, bool, error) {
	r, err := p.l.Reserve(ctx, maxWait)
	if err != nil {
		return 0, false, err
	}
	if !r.Granted {
		// Come back when the earliest free slot starts. Coming back
		// earlier (when it is merely within reach) makes a backlog spin:
		// every message returns, is refused again, and costs a claim and a
		// release each time.
		return max(r.Wait, time.Second), false, nil
	}
	return r.Wait, true, nil
}

func (p pacer) Pause(ctx context.Context, d time.Duration) error {
	return p.l.Pause(ctx, d)
}

func (p pacer) Next(ctx context.Context) (time.Duration, time.Duration, error) {
	wait, err := p.l.Next(ctx)
	return wait, p.l.Rate().Interval(), err
}

// Rate, ReserveN and GiveBack let the gate take slots ahead (slotPacer).
func (p pacer) Rate() pace.Rate { return p.l.Rate() }

func (p pacer) ReserveN(ctx context.Context, n int, maxWait time.Duration) (pace.Slots, error) {
	return p.l.ReserveN(ctx, n, maxWait)
}

func (p pacer) GiveBack(ctx context.Context, s pace.Slots, k int) (pace.Slots, bool, error) {
	return p.l.GiveBack(ctx, s, k)
}

// Handler serves /healthz, /readyz and /metrics for the worker process;
// /healthz is healthz (the worker's Healthz; service.Healthz when nil),
// /readyz pings the database, checks its schema and reads q's stats to tell the queue is
// reachable. Its answer is cached for service.CacheTTLDefault, so probes and
// scrapes in a loop cost one ping and one stats call per TTL.
func Handler(db *sql.DB, q queue.Queue, reg *prometheus.Registry, healthz http.HandlerFunc) http.Handler {
	if healthz == nil {
		healthz = service.Healthz
	}
	ready := &service.Cache[string]{Fetch: func(ctx context.Context) (string, error) {
		if err := db.PingContext(ctx); err != nil {
			return `{"database":"unreachable"}`, err
		}
		// Any schema in this build's range will do (migrate.Check), so old
		// workers stay ready after `migrate up` and after a rollback.
		if msg, ok := service.SchemaReady(ctx, db); !ok {
			body, _ := json.Marshal(map[string]string{"database": "ok", "schema": msg})
			return string(body), errors.New(msg)
		}
		if _, err := q.Stats(ctx); err != nil {
			return `{"database":"ok","queue":"unreachable"}`, err
		}
		return `{"database":"ok","queue":"ok"}`, nil
	}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		body, err := ready.Get(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		if body == "" {
			body = `{"status":"request cancelled"}`
		}
		w.Write([]byte(body + "\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// NewRegistry returns a registry with the process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
