package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider/providers"
	"github.com/owedhq/owed/internal/provider/providertest"
	"github.com/owedhq/owed/internal/testdb"
	"github.com/owedhq/owed/internal/worker"
)

// With OWED_PROVIDER_RATE unset a provider account keeps its provider's
// default pace (Telegram: 30/s, providers.DefaultRate), shared through its
// owed_provider_pace row; set, the variable wins for every account,
// "unlimited" and "0" turn pacing off, and a wrong value names the variable.
func TestProviderRateDefaultsPerProvider(t *testing.T) {
	db := testdb.New(t)
	fake := providertest.NewServer(t, "/bot123:abc/sendMessage", nil)
	t.Setenv("OWED_DATABASE_URL", db.AppURL)
	t.Setenv("OWED_QUEUE_URL", "http://127.0.0.1:8181")
	t.Setenv("OWED_QUEUE_TOKEN", "token")
	t.Setenv("OWED_PROVIDER_TELEGRAM", providers.Telegram)
	t.Setenv("OWED_TELEGRAM_TOKEN", "123:abc")
	t.Setenv("OWED_TELEGRAM_BASE_URL", fake.URL)

	// paceOf loads the configuration as cmd/worker does and returns the
	// Telegram account's name and the rate its pace keeps.
	paceOf := func(t *testing.T) (string, worker.Pacer, pace.Rate) {
		t.Helper()
		c, err := worker.LoadConfig()
		if err != nil {
			t.Fatal(err)
		}
		router, err := providers.New(c.Providers)
		if err != nil {
			t.Fatal(err)
		}
		s, err := router.For(payload.ChannelTelegram)
		if err != nil {
			t.Fatal(err)
		}
		p := worker.PacesFor(db.App, c.ProviderRate.For(router.DefaultRate))(s.Name())
		rated, ok := p.(interface{ Rate() pace.Rate })
		if !ok {
			t.Fatalf("pace of %s is %T, not a Limiter", s.Name(), p)
		}
		return s.Name(), p, rated.Rate()
	}
	rows := func(t *testing.T, account string) int {
		t.Helper()
		var n int
		if err := db.Owner.QueryRow(`SELECT count(*) FROM owed_provider_pace WHERE account = $1`, account).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	for _, unset := range []string{"", "  "} {
		t.Setenv("OWED_PROVIDER_RATE", unset)
		account, p, r := paceOf(t)
		if want := (pace.Rate{Count: 30, Per: time.Second}); r != want || providers.DefaultRate(providers.Telegram) != want {
			t.Errorf("OWED_PROVIDER_RATE=%q: telegram paced at %s, want %s (its published limit)", unset, r, want)
		}
		if _, granted, err := p.Reserve(context.Background(), time.Minute); err != nil || !granted {
			t.Fatalf("first reserve: granted %v, err %v", granted, err)
		}
		if n := rows(t, account); n != 1 {
			t.Errorf("after a reserve at the default pace: %d owed_provider_pace rows for %s, want 1", n, account)
		}
	}

	t.Setenv("OWED_PROVIDER_RATE", "5/m")
	if _, _, r := paceOf(t); r != (pace.Rate{Count: 5, Per: time.Minute}) {
		t.Errorf("OWED_PROVIDER_RATE=5/m: telegram paced at %s, want the set rate", r)
	}
	for _, off := range []string{"unlimited", "0", "Unlimited"} {
		t.Setenv("OWED_PROVIDER_RATE", off)
		if _, _, r := paceOf(t); !r.IsUnlimited() {
			t.Errorf("OWED_PROVIDER_RATE=%s: telegram paced at %s, want unlimited", off, r)
		}
	}
	for _, bad := range []string{"fast", "30", "0/s", "30/fortnight"} {
		t.Setenv("OWED_PROVIDER_RATE", bad)
		if _, err := worker.LoadConfig(); err == nil || !strings.Contains(err.Error(), "OWED_PROVIDER_RATE") {
			t.Errorf("OWED_PROVIDER_RATE=%s: %v, want an error naming the variable", bad, err)
		}
	}
}
