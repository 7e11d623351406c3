// Command river runs River (github.com/riverqueue/river), owed's peer, on
// bench/e2e's work: N jobs due now, each one HTTP POST to the sandbox
// provider, recorded complete. bench/river (in owed's module) starts it
// twice per run, around its reading of the database's counters, and hosts
// the sandbox, as bench/e2e hosts it for owed's worker processes:
//
//	river -database-url URL -rows N setup
//	river -database-url URL -provider URL -rows N -workers 200 [-tuned] work
//
// setup migrates River's schema with rivermigrate into the (empty)
// database and inserts the jobs; work starts a River client with one queue
// of -workers workers, waits until River has recorded every job complete,
// and prints one JSON line: the seconds from the client's start to the last
// completion, and the completions and failures it saw. -tuned sets
// FetchCooldown to 5 ms and FetchPollInterval to 100 ms; without it every
// River setting is its default.
//
// This is a Go module of its own so River and pgx stay out of owed's go.mod.
// It imports owed's webhook adapter (a replace of the root module), so each
// job sends the very request owed's worker sends to the sandbox: the same
// Standard Webhooks body and headers, through the same HTTP client.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/webhook"
)

const (
	// tenants matches bench/e2e, which spreads its rows over 20 tenants.
	tenants = 20
	// insertBatch is how many jobs one InsertManyFast (a COPY) carries.
	insertBatch = 5000
	// tunedFetchCooldown and tunedFetchPollInterval are the tuned run's
	// settings (issue 26); River's defaults are 100 ms and 1 s.
	tunedFetchCooldown     = 5 * time.Millisecond
	tunedFetchPollInterval = 100 * time.Millisecond
	// drainLimit bounds a run, as bench/e2e's does: a run that stalls says
	// so instead of hanging.
	drainLimit = 15 * time.Minute
	// stopTimeout bounds the client's graceful stop after the run.
	stopTimeout = 30 * time.Second
)

// sendArgs is one notification, as bench/e2e schedules them: a recipient
// of its own, a tenant round-robin, the text "hello" on the sms channel.
type sendArgs struct {
	Tenant    string `json:"tenant"`
	Recipient string `json:"recipient"`
	Text      string `json:"text"`
}

func (sendArgs) Kind() string { return "send" }

// sendWorker POSTs a job to the provider through owed's webhook adapter.
type sendWorker struct {
	river.WorkerDefaults[sendArgs]
	sender *webhook.Client
}

func (w *sendWorker) Work(ctx context.Context, job *river.Job[sendArgs]) error {
	// The key has the shape of owed's (<prefix><id>-<due µs>), so the
	// sandbox records and de-duplicates both alike.
	key := "river-" + strconv.FormatInt(job.ID, 10) + "-" + strconv.FormatInt(job.ScheduledAt.UTC().UnixMicro(), 10)
	_, err := w.sender.Send(ctx, provider.Delivery{Tenant: job.Args.Tenant, NotificationID: job.ID,
		Recipient: job.Args.Recipient, Channel: "sms", Kind: "reminder",
		Content: payload.Content{Text: job.Args.Text}, IdempotencyKey: key})
	return err
}

// result is what work prints.
type result struct {
	Seconds   float64 `json:"seconds"`
	Completed int     `json:"completed"`
	Failed    int     `json:"failed"`
}

type opts struct {
	databaseURL, providerURL string
	rows, workers, maxConns  int
	tuned                    bool
}

func main() {
	var o opts
	flag.StringVar(&o.databaseURL, "database-url", "", "River's database (postgres:// URL); setup migrates it")
	flag.StringVar(&o.providerURL, "provider", "", "the sandbox provider's URL (work)")
	flag.IntVar(&o.rows, "rows", 10000, "jobs to insert (setup) and to wait for (work)")
	flag.IntVar(&o.workers, "workers", 200, "the queue's MaxWorkers (work)")
	flag.IntVar(&o.maxConns, "max-conns", 0, "the pgx pool's MaxConns; 0 keeps pgxpool's default (max(4, cores))")
	flag.BoolVar(&o.tuned, "tuned", false, "FetchCooldown 5ms and FetchPollInterval 100ms instead of River's defaults (work)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [flags] setup|work\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(context.Background(), o, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "bench/peers/river:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o opts, step string) error {
	if o.databaseURL == "" {
		return errors.New("-database-url: required")
	}
	if o.rows < 1 {
		return fmt.Errorf("-rows: must be at least 1 (got %d)", o.rows)
	}
	cfg, err := pgxpool.ParseConfig(o.databaseURL)
	if err != nil {
		return fmt.Errorf("-database-url: %w", err)
	}
	if o.maxConns > 0 {
		cfg.MaxConns = int32(o.maxConns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	switch step {
	case "setup":
		return setup(ctx, pool, o)
	case "work":
		res, err := work(ctx, pool, o)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	return fmt.Errorf("step %q: want setup or work", step)
}

// setup applies River's migrations and inserts the jobs, all due now.
func setup(ctx context.Context, pool *pgxpool.Pool, o opts) error {
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	// An insert-only client: no queues, so it works nothing.
	client, err := river.NewClient(driver, &river.Config{Logger: logger()})
	if err != nil {
		return err
	}
	for start := 0; start < o.rows; start += insertBatch {
		batch := make([]river.InsertManyParams, 0, insertBatch)
		for i := start; i < min(o.rows, start+insertBatch); i++ {
			batch = append(batch, river.InsertManyParams{Args: sendArgs{Tenant: fmt.Sprintf("tenant-%d", i%tenants),
				Recipient: fmt.Sprintf("r%d", i), Text: "hello"}})
		}
		if _, err := client.InsertManyFast(ctx, batch); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	}
	return nil
}

// work runs a client until River has recorded o.rows jobs complete.
func work(ctx context.Context, pool *pgxpool.Pool, o opts) (result, error) {
	var res result
	if o.providerURL == "" {
		return res, errors.New("-provider: required")
	}
	// The worker's sandbox sender, as owed's providers package builds it
	// for OWED_PROVIDER=sandbox.
	sender, err := webhook.New(webhook.Config{URL: o.providerURL, Name: "sandbox", EnvPrefix: "-provider", AllowHTTP: true})
	if err != nil {
		return res, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &sendWorker{sender: sender})
	cfg := &river.Config{Logger: logger(), Workers: workers,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.workers}}}
	if o.tuned {
		cfg.FetchCooldown, cfg.FetchPollInterval = tunedFetchCooldown, tunedFetchPollInterval
	}
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return res, err
	}
	// A channel with room for every event: River drops the events a full
	// channel cannot take, and a dropped completion would hang the count.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: 2*o.rows + 1000,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
	defer cancel()
	ctx, stop := context.WithTimeout(ctx, drainLimit)
	defer stop()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return res, err
	}
	var last time.Time
	for res.Completed < o.rows {
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("River recorded %d of %d jobs complete within %s (%d failures)", res.Completed, o.rows, drainLimit, res.Failed)
		case e := <-events:
			// A completion event is sent after the completer's batch has
			// committed: the job is recorded complete by then.
			if e.Kind == river.EventKindJobCompleted {
				res.Completed++
				last = time.Now()
			} else {
				res.Failed++
			}
		}
	}
	res.Seconds = last.Sub(start).Seconds()
	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancelStop()
	return res, client.Stop(stopCtx)
}

// logger passes on River's warnings and errors only.
func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
