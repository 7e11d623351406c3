// Command sweeper is the URL the hosted cron calls every minute and the
// scheduling API applications write to. Configuration is OWED_* variables
// (see the README); it runs until SIGTERM or SIGINT, then finishes in-flight
// requests. A second signal exits at once.
package main

import (
	"fmt"
	"os"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/sweeper"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sweeper:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := sweeper.LoadConfig()
	if err != nil {
		return err
	}
	log, err := service.NewLogger(os.Stderr, "sweeper", cfg.LogLevel)
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
	srv, err := sweeper.New(cfg, ledger.New(db, nil), q, log)
	if err != nil {
		return err
	}
	ln, err := service.Listen(cfg.ListenAddr, "OWED_LISTEN_ADDR")
	if err != nil {
		return err
	}
	return service.Serve(ctx, ln, srv.Handler(), log)
}
