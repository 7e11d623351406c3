package worker_test

import (
	"strings"
	"testing"

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
		Concurrency: worker.ConcurrencyDefault, MaxAttempts: worker.MaxAttemptsDefault,
		ShutdownTimeout: worker.ShutdownTimeoutDefault, SendTimeout: worker.SendTimeoutDefault,
		VisibilityTimeout: worker.VisibilityTimeoutDefault, RetryAfterMax: worker.RetryAfterMaxDefault,
		Resolver: worker.ResolverDefault, IdempotencyPrefix: sweep.KeyPrefixDefault, Queue: c.Queue, Providers: c.Providers}
	if c != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
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
