package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider/sandbox"
)

// sandboxEnv is the sandbox's configuration from OWED_SANDBOX_* variables;
// each has a flag of the same name that overrides it. OWED_SANDBOX_SECRET is
// shared with the worker, which signs with it.
type sandboxEnv struct {
	Addr                   string  `envconfig:"ADDR"`
	Rate                   string  `envconfig:"RATE"`
	Burst                  int     `envconfig:"BURST"`
	Secret                 string  `envconfig:"SECRET"`
	ErrorRate              float64 `envconfig:"ERROR_RATE"`
	TimeoutRate            float64 `envconfig:"TIMEOUT_RATE"`
	TimeoutSeconds         float64 `envconfig:"TIMEOUT_SECONDS"`
	TimeoutMode            string  `envconfig:"TIMEOUT_MODE"`
	StormSeconds           float64 `envconfig:"STORM_SECONDS"`
	StormRetryAfterSeconds int     `envconfig:"STORM_RETRY_AFTER_SECONDS"`
	PermanentRecipient     string  `envconfig:"PERMANENT_RECIPIENT"`
}

// faultFields are the sandbox.Faults JSON names, which double as the flag and
// variable names, so a validation error can point at what the operator typed.
var faultFields = []string{"error_rate", "timeout_rate", "timeout_seconds", "timeout_mode",
	"storm_seconds", "storm_retry_after_seconds", "permanent_recipient"}

// providerActions are provider's actions.
var providerActions = []string{"serve", "pause", "resume"}

func providerCmd(ctx context.Context, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl provider serve [flags] | pause --account NAME --reason TEXT | resume --account NAME\n\n"+
		"  serve    run the local sandbox provider, with fault knobs (see 'owedctl provider serve --help')\n"+
		"  pause    hold a provider account: no worker sends on it until it is resumed\n"+
		"  resume   lift a hold, or close the circuit an account error opened\n\n"+
		"pause and resume work on the database: --database-url or OWED_DATABASE_URL.\n\n"+
		"example:\n  "+sandboxExample+"\n"),
		providerActions); err != nil {
		return err
	}
	switch args[0] {
	case "pause":
		return providerPause(ctx, args[1:])
	case "resume":
		return providerResume(ctx, args[1:])
	}
	return providerServe(ctx, args[1:])
}

const sandboxExample = "OWED_SANDBOX_SECRET=whsec_$(openssl rand -base64 32) owedctl provider serve --rate 40/m --error-rate 0.05 --permanent-recipient bounce"

// providerServe runs the sandbox provider until the context ends.
func providerServe(ctx context.Context, args []string) error {
	env := sandboxEnv{Addr: sandbox.DefaultAddr, Rate: sandbox.DefaultRate, Burst: sandbox.DefaultBurst,
		TimeoutSeconds: sandbox.DefaultTimeoutSeconds, TimeoutMode: sandbox.Timeout504,
		StormRetryAfterSeconds: sandbox.DefaultStormRetryAfterSeconds}
	if err := config.Process("OWED_SANDBOX", &env); err != nil {
		// envconfig names the variable and the value it could not parse.
		return usageError{err.Error()}
	}

	fs := newFlags("provider serve", "provider serve [flags]", sandboxExample)
	fs.StringVar(&env.Addr, "addr", env.Addr, "listen address; keep it on loopback, the admin endpoints are unauthenticated (env OWED_SANDBOX_ADDR)")
	fs.StringVar(&env.Rate, "rate", env.Rate, "rate limit like 40/m, 2400/h or 10/1.5s, read like OWED_PROVIDER_RATE (env OWED_SANDBOX_RATE)")
	fs.IntVar(&env.Burst, "burst", env.Burst, "requests allowed back to back before the steady rate applies (env OWED_SANDBOX_BURST)")
	fs.StringVar(&env.Secret, "secret", env.Secret, "Standard Webhooks secret (whsec_…) requests must be signed with; prefer the env var, flags show in ps (env OWED_SANDBOX_SECRET)")
	fs.Float64Var(&env.ErrorRate, "error-rate", env.ErrorRate, "fraction of sends answered 503 (env OWED_SANDBOX_ERROR_RATE)")
	fs.Float64Var(&env.TimeoutRate, "timeout-rate", env.TimeoutRate, "fraction of sends that hang (env OWED_SANDBOX_TIMEOUT_RATE)")
	fs.Float64Var(&env.TimeoutSeconds, "timeout-seconds", env.TimeoutSeconds, "how long a hung send hangs (env OWED_SANDBOX_TIMEOUT_SECONDS)")
	fs.StringVar(&env.TimeoutMode, "timeout-mode", env.TimeoutMode, "how a hung send ends: 504 or close (env OWED_SANDBOX_TIMEOUT_MODE)")
	fs.Float64Var(&env.StormSeconds, "storm-seconds", env.StormSeconds, "answer every send 429 for this long after start (env OWED_SANDBOX_STORM_SECONDS)")
	fs.IntVar(&env.StormRetryAfterSeconds, "storm-retry-after-seconds", env.StormRetryAfterSeconds, "Retry-After of a storm's 429s (env OWED_SANDBOX_STORM_RETRY_AFTER_SECONDS)")
	fs.StringVar(&env.PermanentRecipient, "permanent-recipient", env.PermanentRecipient, "regexp; matching recipients get 422, a permanent failure (env OWED_SANDBOX_PERMANENT_RECIPIENT)")
	if err := parseOnlyFlags(fs, args, ""); err != nil {
		return err
	}

	rate, err := pace.ParseRate(env.Rate)
	if err != nil {
		return usageError{fmt.Sprintf("--rate / OWED_SANDBOX_RATE: %v", err)}
	}
	if rate.IsUnlimited() {
		return usageError{fmt.Sprintf("--rate / OWED_SANDBOX_RATE: %q: the sandbox always enforces a limit; give one like %s",
			env.Rate, sandbox.DefaultRate)}
	}
	if env.Burst < 1 {
		return usageError{fmt.Sprintf("--burst / OWED_SANDBOX_BURST: must be at least 1 (got %d)", env.Burst)}
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Str("component", "sandbox").Logger()
	srv, err := sandbox.New(sandbox.Config{
		Rate: rate, Burst: env.Burst, Secret: env.Secret, Log: log,
		Faults: sandbox.Faults{
			ErrorRate: env.ErrorRate, TimeoutRate: env.TimeoutRate, TimeoutSeconds: env.TimeoutSeconds,
			TimeoutMode: env.TimeoutMode, StormSeconds: env.StormSeconds,
			StormRetryAfterSeconds: env.StormRetryAfterSeconds, PermanentRecipient: env.PermanentRecipient,
		},
	})
	if err != nil {
		return usageError{nameFaultOptions(err.Error())}
	}
	ln, err := net.Listen("tcp", env.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s (--addr / OWED_SANDBOX_ADDR): %w", env.Addr, err)
	}
	// The secret itself is never logged, only whether requests are checked.
	log.Info().Str("addr", ln.Addr().String()).Str("rate", rate.String()).Int("burst", env.Burst).
		Bool("signed", env.Secret != "").Interface("faults", srv.Faults()).Msg("sandbox listening")
	start := time.Now()
	if err := srv.Serve(ctx, ln); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	st := srv.Stats()
	log.Info().Int64("accepted", st.Accepted).Int64("duplicates", st.Duplicates).
		Int64("rate_limited", st.RateLimited).Dur("uptime_ms", time.Since(start)).Msg("sandbox stopped")
	return nil
}

// nameFaultOptions rewrites the JSON field names in a sandbox configuration
// error to the flag and variable the operator sets.
func nameFaultOptions(msg string) string {
	pairs := make([]string, 0, 2*len(faultFields))
	for _, f := range faultFields {
		pairs = append(pairs, f, "--"+strings.ReplaceAll(f, "_", "-")+" / OWED_SANDBOX_"+strings.ToUpper(f))
	}
	return strings.NewReplacer(pairs...).Replace(msg)
}
