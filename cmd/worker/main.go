// Command worker drains the delivery queue and sends through the configured
// providers at their shared pace. Configuration is OWED_* variables (see the
// README). SIGTERM stops consuming, lets in-flight sends finish within
// OWED_SHUTDOWN_TIMEOUT, hands the rest back to the queue and exits 0; a
// second signal exits at once.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider/providers"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/resolve"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := worker.LoadConfig()
	if err != nil {
		return err
	}
	log, err := service.NewLogger(os.Stderr, "worker", cfg.LogLevel)
	if err != nil {
		return err
	}
	ctx, stop := service.SignalContext()
	defer stop()

	db, err := service.OpenDB(ctx, cfg.DatabaseURL, cfg.DBMaxConns)
	if err != nil {
		return err
	}
	defer db.Close()
	q, err := queue.New(cfg.Queue, queue.WithLogger(log))
	if err != nil {
		return err
	}
	router, err := providers.New(cfg.Providers)
	if err != nil {
		return err
	}
	paces, err := worker.Paces(db, cfg.ProviderRate)
	if err != nil {
		return err
	}
	reg := worker.NewRegistry()
	o := cfg.Options()
	o.Ledger, o.Queue, o.Route, o.Pace, o.Log = ledger.New(db, nil), q, router.For, paces, log
	o.Metrics = worker.NewMetrics(reg)
	if cfg.Resolver == "sql" {
		o.Resolver = resolve.NewSQL(db)
	}
	w, err := worker.New(o)
	if err != nil {
		return err
	}
	ln, err := service.Listen(cfg.ListenAddr, "OWED_LISTEN_ADDR")
	if err != nil {
		return err
	}
	log.Info().Interface("providers", router.Assignments()).Str("rate", cfg.ProviderRate).
		Int("concurrency", cfg.Concurrency).Msg("worker starting")

	srvErr := make(chan error, 1)
	go func() { srvErr <- service.Serve(ctx, ln, worker.Handler(db, q, reg), log) }()
	runErr := w.Run(ctx)
	stop()
	return errors.Join(runErr, <-srvErr)
}
