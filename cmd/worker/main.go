// Command worker drains the delivery queue and sends through the configured
// providers at their shared pace. Configuration is OWED_* variables (see the
// README); it refuses to start as a database role that row-level security
// does not bind. Its listener (OWED_LISTEN_ADDR) is operational only:
// /healthz, /readyz and /metrics, unless OWED_METRICS_ADDR moves the last
// two to a listener of their own. SIGTERM stops consuming (a receive under way finishes, within
// its 5 s long poll, and what it got is handed back), lets in-flight sends
// finish within OWED_SHUTDOWN_TIMEOUT, hands the rest back to the queue
// without costing any row an attempt, and exits 0; a second signal exits at
// once.
//
// `worker --help` lists every variable with its default, `worker --version`
// prints the build, and `worker healthcheck` asks the running process for
// /healthz on OWED_LISTEN_ADDR (the image has no shell or curl).
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/owedhq/owed/internal/buildinfo"
	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider/providers"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/resolve"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/worker"
)

func main() {
	buildinfo.Service{Name: "worker", Summary: "drains the delivery queue and sends through the providers at their shared pace",
		Specs: specs, HealthzAddr: healthzAddr}.Main(run)
}

// specs are what LoadConfig and LoadOperations fill, with the defaults they
// give when nothing is set, and what the worker's variables that default to
// another setting mean unset (the worker applies them in maxAttempts and
// Retries.schedule). The environment is cleared first: help shows
// defaults, never a value (a secret) set here.
func specs() []any {
	os.Clearenv()
	cfg, _ := worker.LoadConfig()
	ops, _ := service.LoadOperations("")
	derived := config.Defaults{"OWED_MAX_ATTEMPTS": fmt.Sprintf("the channel's retry schedule's length+1 (%d)", len(cfg.RetrySchedule)+1)}
	for _, ch := range payload.Channels() {
		derived["OWED_RETRY_SCHEDULE_"+strings.ToUpper(ch)] = "OWED_RETRY_SCHEDULE"
	}
	return []any{&cfg, &cfg.Providers, &cfg.Queue, &cfg.Queue.Rest, &cfg.Queue.SQS, &cfg.Queue.JetStream, &ops, derived}
}

// healthzAddr is OWED_LISTEN_ADDR: the worker serves /healthz there
// whether or not OWED_METRICS_ADDR moves /readyz and /metrics away. The
// rest of the configuration is the running process's to validate: only
// the address matters here.
func healthzAddr() (string, error) {
	cfg, err := worker.LoadConfig()
	if cfg.ListenAddr != "" {
		return cfg.ListenAddr, nil
	}
	return "", err
}

func run() error {
	cfg, err := worker.LoadConfig()
	if err != nil {
		return err
	}
	ops, err := service.LoadOperations("")
	if err != nil {
		return err
	}
	p, err := service.Start("worker", service.Basics{LogLevel: cfg.LogLevel, DatabaseURL: cfg.DatabaseURL,
		DBMaxConns: cfg.DBMaxConns, ListenAddr: cfg.ListenAddr, Operations: ops})
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, db, log := p.Ctx, p.DB, p.Log
	q, err := backends.Open(ctx, cfg.Queue, log)
	if err != nil {
		return err
	}
	defer q.Close()
	router, err := providers.New(cfg.Providers)
	if err != nil {
		return err
	}
	paces := worker.PacesFor(db, router.Rates(cfg.ProviderRate))
	reg := worker.NewRegistry()
	// The pool's statistics (open, in use, idle, waits), named by the
	// role the pool logs in as.
	reg.MustRegister(buildinfo.Collector(), collectors.NewDBStatsCollector(db, "runtime"))
	o := cfg.Options()
	clk := clock.Real()
	o.Ledger, o.Queue, o.Route, o.Pace, o.Log, o.Clock = ledger.New(db, clk), q, router.For, paces, log, clk
	o.Metrics = worker.NewMetrics(reg)
	if cfg.Resolver == "sql" {
		o.Resolver = resolve.NewSQL(db)
	}
	w, err := worker.New(o)
	if err != nil {
		return err
	}
	log.Info().Interface("providers", router.Assignments()).Stringer("rate", cfg.ProviderRate).
		Str("queue_backend", cfg.Queue.Backend).Str("queue", cfg.Queue.Target()).
		Int("concurrency", cfg.Concurrency).Msg("worker starting")

	srvErr := make(chan error, 1)
	go func() { srvErr <- p.Serve(w.HealthzOnly(), worker.Handler(db, q, reg, w.Healthz)) }()
	runErr := w.Run(ctx)
	p.Shutdown()
	return errors.Join(runErr, <-srvErr)
}
