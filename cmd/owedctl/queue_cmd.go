package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/wire"
	"github.com/owedhq/owed/internal/service"
)

// queueActions are queue's actions.
var queueActions = []string{"serve", "serve-jetstream", "stats", "provision"}

// queueCmd runs the local queue emulator (queue serve) or a local
// JetStream server (queue serve-jetstream), prints a queue's depths
// (queue stats), or provisions the configured backend (queue provision).
func queueCmd(ctx context.Context, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl queue serve|serve-jetstream|stats|provision [flags]\n\n"+
		"  serve             run the local queue emulator (see 'owedctl queue serve --help')\n"+
		"  serve-jetstream   run a local NATS server with JetStream (owedctl dev --queue jetstream runs it)\n"+
		"  stats             print the configured queue's depths (OWED_QUEUE_BACKEND: rest, sqs or jetstream)\n"+
		"  provision         create or update the configured backend's streams and consumer, or queues,\n"+
		"                    as docs/queues.md lists (--replicas N for JetStream, --dry-run prints them)\n\n"+
		"example:\n  OWED_QUEUE_URL=http://127.0.0.1:8181 OWED_QUEUE_TOKEN=dev-token owedctl queue stats\n"),
		queueActions); err != nil {
		return err
	}
	switch args[0] {
	case "serve":
		return queueServe(ctx, args[1:])
	case "serve-jetstream":
		return queueServeJetStream(ctx, args[1:])
	case "provision":
		return queueProvision(ctx, args[1:])
	}
	return runQueueStats(ctx, os.Stdout, args[1:])
}

func queueServe(ctx context.Context, args []string) error {
	var cfg emulator.Config
	if err := config.Process("OWED", &cfg); err != nil {
		return usageError{err.Error()}
	}
	ops, err := service.LoadOperations("")
	if err != nil {
		return usageError{err.Error()}
	}
	fs := newFlags("queue serve", "queue serve [flags]",
		"OWED_QUEUE_TOKEN=dev-token OWED_QUEUE_DATABASE_URL=postgres://owed_queue@localhost/owed owedctl queue serve --addr 127.0.0.1:8181")
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "listen address ($OWED_QUEUE_ADDR)")
	// The token and database URL default to empty rather than to their
	// variables so --help never prints a secret.
	token := fs.String("token", "", "bearer token clients must send (default $OWED_QUEUE_TOKEN; prefer the variable, flags show in ps)")
	dbURL := fs.String("database-url", "", "PostgreSQL database for the owed_queue schema, as a role of its own, never the ledger's owner (default $OWED_QUEUE_DATABASE_URL)")
	queues := fs.String("queues", strings.Join(cfg.Queues, ","), "comma-separated queue names to accept; empty accepts any ($OWED_QUEUE_QUEUES)")
	fs.DurationVar(&cfg.DedupWindow, "dedup-window", cfg.DedupWindow, "how long an idempotency key is remembered ($OWED_QUEUE_DEDUP_WINDOW)")
	fs.DurationVar(&cfg.VisibilityTimeout, "visibility-timeout", cfg.VisibilityTimeout, "visibility timeout of consumes that ask for none ($OWED_QUEUE_VISIBILITY_TIMEOUT)")
	fs.IntVar(&cfg.MaxReceives, "max-receives", cfg.MaxReceives,
		"receives before the emulator dead-letters a message itself: a safety net, owed's ledger decides dead letters ($OWED_QUEUE_MAX_RECEIVES)")
	fs.BoolVar(&cfg.SynchronousCommit, "synchronous-commit", cfg.SynchronousCommit,
		"keep PostgreSQL synchronous_commit on: slower, and only a PostgreSQL crash could lose the last commits without it ($OWED_QUEUE_SYNCHRONOUS_COMMIT)")
	fs.IntVar(&cfg.MaxConns, "max-conns", cfg.MaxConns, "database connections ($OWED_QUEUE_MAX_CONNS)")
	fs.Float64Var(&cfg.ThrottleRate, "fault-throttle-rate", cfg.ThrottleRate, "fraction 0..1 of requests answered with a throttle ($OWED_QUEUE_FAULT_THROTTLE_RATE)")
	fs.IntVar(&cfg.ThrottleStatus, "fault-throttle-status", cfg.ThrottleStatus, "throttle status, 429 or 503 ($OWED_QUEUE_FAULT_THROTTLE_STATUS)")
	fs.StringVar(&cfg.ThrottleScope, "fault-throttle-scope", cfg.ThrottleScope, "throttle publish only (publish) or every endpoint (all) ($OWED_QUEUE_FAULT_THROTTLE_SCOPE)")
	fs.IntVar(&cfg.RetryAfterSeconds, "fault-retry-after", cfg.RetryAfterSeconds, "Retry-After seconds sent with a throttle ($OWED_QUEUE_FAULT_RETRY_AFTER_SECONDS)")
	fs.BoolVar(&cfg.RetryAfterHTTPDate, "fault-retry-after-http-date", cfg.RetryAfterHTTPDate, "send Retry-After as an HTTP date ($OWED_QUEUE_FAULT_RETRY_AFTER_HTTP_DATE)")
	fs.IntVar(&cfg.LatencyMS, "fault-latency-ms", cfg.LatencyMS, "latency added to every request ($OWED_QUEUE_FAULT_LATENCY_MS)")
	fs.Float64Var(&cfg.RedeliveryRate, "fault-redelivery-rate", cfg.RedeliveryRate, "fraction 0..1 of consumed messages delivered twice ($OWED_QUEUE_FAULT_REDELIVERY_RATE)")
	level := fs.String("log-level", service.LogLevelDefault, "log level: debug logs every request")
	if err := parseOnlyFlags(fs, args, ""); err != nil {
		return err
	}
	if *token != "" {
		cfg.Token = *token
	}
	if *dbURL != "" {
		cfg.DatabaseURL = *dbURL
	}
	cfg.Queues = nil
	for _, q := range strings.Split(*queues, ",") {
		if q = strings.TrimSpace(q); q != "" {
			cfg.Queues = append(cfg.Queues, q)
		}
	}
	log, err := service.NewLogger(os.Stderr, "queue-emulator", *level)
	if err != nil {
		return usageError{fmt.Sprintf("--log-level %q: want debug, info, warn or error", *level)}
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err.Error()}
	}
	// The emulator creates its schema with this role, so the check comes
	// first: the ledger's owner (or a superuser) is refused before it
	// creates anything.
	if err := service.CheckDatabase(ctx, log, "OWED_QUEUE_DATABASE_URL", cfg.DatabaseURL, ops.AllowInsecureRole); err != nil {
		return err
	}

	em, err := emulator.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer em.Stop()
	em.Start(ctx)
	ln, err := service.Listen(cfg.Addr, "--addr / OWED_QUEUE_ADDR")
	if err != nil {
		return err
	}
	log.Info().Str("addr", ln.Addr().String()).Strs("queues", cfg.Queues).Dur("dedup_window", cfg.DedupWindow).
		Dur("visibility_timeout", cfg.VisibilityTimeout).Int("max_receives", cfg.MaxReceives).
		Bool("synchronous_commit", cfg.SynchronousCommit).Interface("faults", cfg.Faults).Msg("queue emulator: starting")
	return em.Serve(ctx, ln)
}

// runQueueStats prints the configured queue's depths to out.
func runQueueStats(ctx context.Context, out io.Writer, args []string) error {
	fs := newFlags("queue stats", "queue stats [--queue NAME] [--json]", "OWED_QUEUE_URL=http://127.0.0.1:8181 OWED_QUEUE_TOKEN=dev-token owedctl queue stats")
	qf := addQueueFlags(fs)
	if err := parseOnlyFlags(fs, args, ""); err != nil {
		return err
	}
	q, target, err := qf.open(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	st, err := q.Stats(ctx)
	if err != nil {
		return err
	}
	if *qf.json {
		// The shape of the REST contract's stats, whatever the backend.
		return json.NewEncoder(out).Encode(wire.Stats{Visible: st.Visible, InFlight: st.InFlight, Delayed: st.Delayed,
			DeadLetterDepth: st.DeadLetterDepth, OldestAgeSeconds: st.OldestAge.Seconds()})
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "QUEUE\tVISIBLE\tIN FLIGHT\tDELAYED\tDEAD LETTERS\tOLDEST AGE")
	fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%.0fs\n", target, st.Visible, st.InFlight, st.Delayed, st.DeadLetterDepth, st.OldestAge.Seconds())
	return w.Flush()
}
