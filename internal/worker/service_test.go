package worker_test

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/sweep"
	"github.com/owedhq/owed/internal/worker"
)

// The OWED_* variables that are not set take the Go constants, the only
// source of the worker's defaults; one set to an unusable value still fails
// with its name instead of falling back.
func TestConfigDefaultsAreTheConstants(t *testing.T) {
	t.Setenv("OWED_DATABASE_URL", "postgres://owed@127.0.0.1/owed")
	t.Setenv("OWED_QUEUE_URL", "http://127.0.0.1:8181")
	t.Setenv("OWED_QUEUE_TOKEN", "token")
	c, err := worker.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := worker.Config{DatabaseURL: c.DatabaseURL, ListenAddr: worker.ListenAddrDefault,
		LogLevel: worker.LogLevelDefault, DBMaxConns: worker.DBMaxConnsDefault,
		Concurrency:     worker.ConcurrencyDefault,
		ShutdownTimeout: worker.ShutdownTimeoutDefault, SendTimeout: worker.SendTimeoutDefault,
		VisibilityTimeout: worker.VisibilityTimeoutDefault, RetryAfterMax: worker.RetryAfterMaxDefault,
		Resolver: worker.ResolverDefault, IdempotencyPrefix: sweep.KeyPrefixDefault,
		AccountPause: pace.AccountPauseDefault, RetrySchedule: worker.MustSchedule(worker.RetryScheduleDefault),
		RetryScheduleWebhook: worker.MustSchedule(worker.RetryScheduleWebhookDefault), Undeliverable: true,
		StallAfter: worker.StallAfterDefault, RequeueAfter: sweep.RequeueAfterDefault, Queue: c.Queue, Providers: c.Providers}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}

	// A retry schedule is durations separated by commas; a wrong one names
	// its variable, and a channel's own schedule overrides the default.
	t.Setenv("OWED_RETRY_SCHEDULE_SMS", "10s,1m")
	if c, err = worker.LoadConfig(); err != nil || c.RetryScheduleSMS.String() != "10s,1m0s" {
		t.Errorf("OWED_RETRY_SCHEDULE_SMS=10s,1m: %v, %v", c.RetryScheduleSMS, err)
	}
	for _, bad := range []string{"30s,soon", "30s,-1m", "0s"} {
		t.Setenv("OWED_RETRY_SCHEDULE", bad)
		if _, err := worker.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_RETRY_SCHEDULE") {
			t.Errorf("OWED_RETRY_SCHEDULE=%s: %v, want an error naming the variable", bad, err)
		}
	}
	t.Setenv("OWED_RETRY_SCHEDULE", worker.RetryScheduleDefault)
	if s := worker.MustSchedule(worker.RetryScheduleWebhookDefault); s[0] != 5*time.Second || len(s) != 7 {
		t.Errorf("webhook default schedule %s, want Standard Webhooks' 5s, 5m, 30m, 2h, 5h, 10h, 10h", s)
	}
	t.Setenv("OWED_REQUEUE_AFTER", "0s")
	if _, err := worker.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_REQUEUE_AFTER") {
		t.Errorf("OWED_REQUEUE_AFTER=0s: %v, want an error naming the variable", err)
	}
	t.Setenv("OWED_REQUEUE_AFTER", "30s")
	if c, err := worker.LoadConfig(); err != nil || c.Options().RequeueAfter != 30*time.Second {
		t.Errorf("OWED_REQUEUE_AFTER=30s: the options' window is %s (%v), want 30s", c.Options().RequeueAfter, err)
	}
	t.Setenv("OWED_PROVIDER_ACCOUNT_PAUSE", "0s")
	if _, err := worker.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_PROVIDER_ACCOUNT_PAUSE") {
		t.Errorf("OWED_PROVIDER_ACCOUNT_PAUSE=0s: %v, want an error naming the variable", err)
	}
	t.Setenv("OWED_PROVIDER_ACCOUNT_PAUSE", "5m")

	// A stall shorter than a slow send plus the rest of a message's path
	// would restart a worker that is only waiting on its provider.
	t.Setenv("OWED_WORKER_STALL_AFTER", "30s")
	if _, err := worker.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_WORKER_STALL_AFTER") {
		t.Errorf("OWED_WORKER_STALL_AFTER=30s: %v, want an error naming the variable", err)
	}
	t.Setenv("OWED_WORKER_STALL_AFTER", "5m")
	if c, err = worker.LoadConfig(); err != nil || c.StallAfter != 5*time.Minute || c.Options().StallAfter != 5*time.Minute {
		t.Errorf("OWED_WORKER_STALL_AFTER=5m: %v, %v", c.StallAfter, err)
	}

	t.Setenv("OWED_PROVIDER_RATE", "40/m")
	if c, err = worker.LoadConfig(); err != nil || c.ProviderRate.String() != "40/m" {
		t.Errorf("OWED_PROVIDER_RATE=40/m: rate %v, err %v", c.ProviderRate, err)
	}
	t.Setenv("OWED_PROVIDER_RATE", "fast")
	if _, err := worker.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_PROVIDER_RATE") {
		t.Errorf("OWED_PROVIDER_RATE=fast: %v, want an error naming the variable", err)
	}
	t.Setenv("OWED_PROVIDER_RATE", "")

	// A message waits in the queue for at most the backend's bound unless
	// OWED_QUEUE_DELAY_MAX says otherwise; longer waits go to the ledger.
	if o := c.Options(); o.QueueDelayMax != time.Minute {
		t.Errorf("the rest backend's queue delay max = %s, want 1m", o.QueueDelayMax)
	}
	t.Setenv("OWED_QUEUE_DELAY_MAX", "20s")
	if c, err = worker.LoadConfig(); err != nil || c.Options().QueueDelayMax != 20*time.Second {
		t.Errorf("OWED_QUEUE_DELAY_MAX=20s: %v, %v", c.QueueDelayMax, err)
	}
	t.Setenv("OWED_QUEUE_DELAY_MAX", "13h")
	if _, err := worker.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_QUEUE_DELAY_MAX") {
		t.Errorf("OWED_QUEUE_DELAY_MAX=13h: %v, want an error naming the variable", err)
	}
	os.Unsetenv("OWED_QUEUE_DELAY_MAX")

	// A per-recipient pace is per channel; unset, a channel has none.
	t.Setenv("OWED_RECIPIENT_RATE_TELEGRAM", "1/s")
	if c, err = worker.LoadConfig(); err != nil || len(c.Options().RecipientRates) != 1 ||
		c.Options().RecipientRates["telegram"].String() != "1/s" {
		t.Errorf("OWED_RECIPIENT_RATE_TELEGRAM=1/s: %v, %v", c.Options().RecipientRates, err)
	}
	t.Setenv("OWED_RECIPIENT_RATE_TELEGRAM", "often")
	if _, err := worker.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_RECIPIENT_RATE_TELEGRAM") {
		t.Errorf("OWED_RECIPIENT_RATE_TELEGRAM=often: %v, want an error naming the variable", err)
	}
	os.Unsetenv("OWED_RECIPIENT_RATE_TELEGRAM")

	t.Setenv("OWED_IDEMPOTENCY_PREFIX", "owed.")
	if _, err := worker.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_IDEMPOTENCY_PREFIX") {
		t.Errorf("OWED_IDEMPOTENCY_PREFIX=owed.: %v, want an error naming the variable", err)
	}
	t.Setenv("OWED_IDEMPOTENCY_PREFIX", "")

	t.Setenv("OWED_WORKER_CONCURRENCY", "0")
	if _, err := worker.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_WORKER_CONCURRENCY") {
		t.Errorf("OWED_WORKER_CONCURRENCY=0: %v, want an error naming the variable", err)
	}
}
