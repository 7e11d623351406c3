// Command sweeper is the URL the hosted cron calls every minute, the
// scheduling API applications write to (both on OWED_LISTEN_ADDR), and the
// listener that sweeps rows due now as soon as their insert commits; /metrics and
// /readyz are on OWED_METRICS_ADDR. Configuration is OWED_* variables (see
// the README); it refuses to start as a database role that row-level
// security does not bind. It runs until SIGTERM or SIGINT, then stops
// taking requests and finishes those in flight, a sweep within its budget
// (OWED_SHUTDOWN_GRACE). A second signal exits at once.
//
// `sweeper --help` lists every variable with its default, `sweeper
// --version` prints the build, and `sweeper healthcheck` asks the running
// process's operator listener for /healthz (the image has no shell or curl).
package main

import (
	"os"

	"github.com/owedhq/owed/internal/buildinfo"
	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/sweeper"
)

func main() {
	buildinfo.Service{Name: "sweeper", Summary: "the minute sweep, the scheduling API and the receipts endpoints",
		Specs: specs, HealthzAddr: healthzAddr}.Main(run)
}

// specs are what LoadConfig and LoadOperations fill, with the defaults they
// give when nothing is set. The environment is cleared first: help shows
// defaults, never a value (a secret) set here.
func specs() []any {
	os.Clearenv()
	cfg, _ := sweeper.LoadConfig()
	ops, _ := service.LoadOperations(sweeper.MetricsAddrDefault)
	return []any{&cfg, &cfg.Materialise, &cfg.Receipt, &cfg.Queue, &cfg.Queue.Rest, &cfg.Queue.SQS, &cfg.Queue.JetStream, &ops}
}

// healthzAddr is the operator listener, which serves /healthz beside
// /readyz and /metrics.
func healthzAddr() (string, error) {
	ops, err := service.LoadOperations(sweeper.MetricsAddrDefault)
	return ops.MetricsAddr, err
}

// operatorMaxConns is the console's pool (OWED_OPERATOR_DATABASE_URL).
const operatorMaxConns = 4

func run() error {
	cfg, err := sweeper.LoadConfig()
	if err != nil {
		return err
	}
	b := cfg.Basics()
	if b.Operations, err = service.LoadOperations(sweeper.MetricsAddrDefault); err != nil {
		return err
	}
	p, err := service.Start("sweeper", b)
	if err != nil {
		return err
	}
	defer p.Close()
	q, err := backends.Open(p.Ctx, cfg.Queue, p.Log)
	if err != nil {
		return err
	}
	defer q.Close()
	p.Log.Info().Str("queue_backend", cfg.Queue.Backend).Str("queue", cfg.Queue.Target()).Msg("sweeper: queue opened")
	clk := clock.Real()
	var opts []sweeper.Option
	if cfg.OperatorDatabaseURL != "" {
		// The console's own pool, as on-call's login: a handful of
		// operators, so a few connections.
		op, err := service.OpenOperatorDB(p.Ctx, p.Log, "OWED_OPERATOR_DATABASE_URL", cfg.OperatorDatabaseURL,
			operatorMaxConns, b.AllowInsecureRole)
		if err != nil {
			return err
		}
		defer op.Close()
		opts = append(opts, sweeper.WithOperator(ledger.New(op, clk)))
	} else if cfg.ConsoleToken != "" || cfg.ConsoleTrustedHeader != "" {
		p.Log.Warn().Msg("console: OWED_OPERATOR_DATABASE_URL is not set: its holds, tenant pauses and audit lines " +
			"are refused by the database, which lets only on-call's login (owed_operator) write them (docs/security.md)")
	}
	if cfg.ReadDatabaseURL != "" {
		// The console's reads on a replica: as few connections as its own
		// pool.
		rd, err := service.OpenDatabase(p.Ctx, "OWED_READ_DATABASE_URL", cfg.ReadDatabaseURL, operatorMaxConns)
		if err != nil {
			return err
		}
		defer rd.Close()
		opts = append(opts, sweeper.WithReads(ledger.New(rd, clk)))
	}
	srv, err := sweeper.New(cfg, ledger.New(p.DB, clk), q, p.Log, clk, opts...)
	if err != nil {
		return err
	}
	// Rows due now are swept when their insert commits (OWED_SWEEP_ON_NOTIFY).
	due := sweeper.NewDueListener(srv)
	if err := due.Start(p.Ctx); err != nil {
		return err
	}
	defer due.Stop()
	// SIGTERM stops taking requests and lets a sweep under way finish
	// within its budget (OWED_SHUTDOWN_GRACE).
	p.ShutdownTimeout = cfg.Grace()
	return p.Serve(srv.Handler(), srv.OpsHandler())
}
