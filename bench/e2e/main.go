// Command e2e measures end-to-end delivery throughput with the provider
// unthrottled: N rows due now → sweeps publish them to the queue → workers
// claim, send to the sandbox provider, settle and ack → every row delivered
// (ledger settled and sandbox counted). It reports deliveries per second,
// receives per delivery (the workers' owed_worker_messages_total over every
// outcome, divided by its "delivered" series), what the ledger database did
// per delivery (benchutil.CostRows: transactions from pg_stat_database;
// statements and their execution time from pg_stat_statements, the
// application role's, when the extension is loaded, as scripts/bench.sh
// does; the whole server's CPU from /proc; the CPU outside Postgres, this
// process's and its exited children's, the sweeper's and workers' with
// -processes, from getrusage, and the two together as the machine's CPU;
// non-HOT updates from pg_stat_user_tables), and with -processes the peak
// resident memory of each process. Its rows also fill owed's lines of the peer comparison that
// bench/all prints beside bench/river's River runs.
//
// -queue picks the backend (OWED_QUEUE_BACKEND): rest (the emulator in this
// process), jetstream (a NATS server embedded in this process on loopback),
// or sqs (the local owed-sqs-server from scripts/install-sqs.sh as a child;
// skipped with a message when it is not installed). The local SQS server is
// a single-threaded Node.js emulator, not Amazon SQS: its figures are
// indicative only.
//
// With -processes (what `make bench` runs) the sweeper and the workers are
// the real bin/sweeper and bin/worker processes, configured by OWED_*
// variables; the queue server and sandbox run as above. Without it, each
// "worker process" is a Worker with its own pool in this process, on a
// queue.Queue from backends.Open, so a profile (-cpuprofile) shows the whole
// path. Either way the sweeps run back to back, as a cron would be called
// while a backlog lasts.
//
//	make build && scripts/with-postgres.sh go run ./bench/e2e -processes -rows 100000
//	make build && scripts/with-postgres.sh go run ./bench/e2e -processes -queue jetstream -rows 20000
//	scripts/with-postgres.sh go run ./bench/e2e -rows 20000 -cpuprofile /tmp/e2e.prof
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/bench/internal/stack"
	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/provider/webhook"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/sweep"
	"github.com/owedhq/owed/internal/worker"
)

const (
	tenants = 20
	// rssTarget is the footprint target per process, in MiB.
	rssTarget = 50
)

type opts struct {
	rows, workers, concurrency int
	processes, breakdown       bool
	bin, queue                 string
	// env is given to the sweeper and every worker process (-env).
	env map[string]string
}

// result is one run's figures.
type result struct {
	perSecond, receivesPer float64
	cost                   benchutil.Cost
	duplicates             int64
	rss                    map[string]float64
}

func main() { benchutil.Main("bench/e2e", run) }

func run() error {
	var o opts
	flag.IntVar(&o.rows, "rows", 20000, "rows due now")
	flag.IntVar(&o.workers, "workers", 2, "worker processes (or in-process pools without -processes)")
	// 2 × 100 sends in flight is River tuned's 200 workers.
	flag.IntVar(&o.concurrency, "concurrency", 100, "sends in flight per worker (OWED_WORKER_CONCURRENCY)")
	flag.BoolVar(&o.processes, "processes", false, "run real bin/sweeper and bin/worker processes")
	flag.StringVar(&o.bin, "bin", "bin", "folder holding the sweeper and worker binaries (-processes)")
	flag.StringVar(&o.queue, "queue", backends.Default, "queue backend: "+strings.Join(backends.Names, ", "))
	flag.BoolVar(&o.breakdown, "breakdown", false, "write each run's statements and table writes per delivery to stderr (benchutil.Breakdown)")
	o.env = map[string]string{}
	flag.Func("env", "OWED_NAME=value given to the sweeper and every worker process (-processes; repeatable)",
		func(v string) error {
			name, value, ok := strings.Cut(v, "=")
			if !ok || !strings.HasPrefix(name, "OWED_") {
				return fmt.Errorf("want OWED_NAME=value, got %q", v)
			}
			o.env[name] = value
			return nil
		})
	runs := flag.Int("runs", 1, "repetitions, each on a fresh database")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the drains (in-process mode)")
	blockprofile := flag.String("blockprofile", "", "write a block profile of the drains (in-process mode)")
	mutexprofile := flag.String("mutexprofile", "", "write a mutex profile of the drains (in-process mode)")
	flag.Parse()
	ctx := context.Background()
	if err := stack.CheckQueue(o.queue); errors.Is(err, stack.ErrNoSQSServer) {
		fmt.Fprintf(os.Stderr, "bench/e2e: skipping -queue sqs: %v\n", err)
		return nil
	} else if err != nil {
		return err
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	for _, p := range []struct{ name, path string }{{"block", *blockprofile}, {"mutex", *mutexprofile}} {
		if p.path == "" {
			continue
		}
		stop, err := profile(p.name, p.path)
		if err != nil {
			return err
		}
		defer stop()
	}
	var rate, receives []float64
	var costs []benchutil.Cost
	var dups int64
	peak := map[string]float64{}
	for r := 0; r < *runs; r++ {
		res, err := once(ctx, o)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench/e2e: %s run %d: %.0f deliveries/s, %.3f receives, %.2f transactions, %.2f statements, %.1f µs Postgres execution, %.1f µs Postgres server CPU, %.1f µs CPU outside Postgres, %.1f µs machine CPU and %.2f non-HOT updates per delivery\n",
			o.queue, r+1, res.perSecond,
			res.receivesPer, res.cost.Xacts, res.cost.Statements, res.cost.ExecMicros, res.cost.ServerCPUMicros, res.cost.OutsideCPUMicros, res.cost.MachineCPUMicros, res.cost.NonHOT)
		rate, receives, costs = append(rate, res.perSecond), append(receives, res.receivesPer), append(costs, res.cost)
		dups += res.duplicates
		for k, v := range res.rss {
			peak[k] = max(peak[k], v)
		}
	}
	benchutil.Report(report(o, rate, receives, costs, dups, peak))
	return nil
}

// profile starts recording the named runtime profile (block or mutex)
// and returns what writes it to path.
func profile(name, path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if name == "block" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	} else {
		runtime.SetMutexProfileFraction(10)
	}
	return func() {
		pprof.Lookup(name).WriteTo(f, 0)
		f.Close()
	}, nil
}

// report builds the rows, named after the backend so bench/all can put
// every backend's in one table.
func report(o opts, rate, receives []float64, costs []benchutil.Cost, dups int64, peak map[string]float64) []benchutil.Row {
	mode := fmt.Sprintf("%d worker processes", o.workers)
	if !o.processes {
		mode = fmt.Sprintf("%d in-process pools", o.workers)
	}
	label := fmt.Sprintf("%s, %d rows, %s × %d", stack.QueueLabel(o.queue), o.rows, mode, o.concurrency)
	rs := benchutil.Summarise(rate)
	system := "owed " + stack.QueueLabel(o.queue)
	throughput := benchutil.Row{Name: "e2e deliveries/s, " + label, Value: rs, Unit: "/s", System: system, Column: benchutil.ColDeliveries}
	// River's figures, and owed ÷ River tuned, come from the same sitting:
	// bench/river runs right after this program (scripts/bench.sh) and
	// the table beside River prints the ratio.
	rows := []benchutil.Row{throughput}
	rows = append(rows,
		benchutil.Row{Name: "e2e receives per delivery (workers' messages counter), " + o.queue, Value: benchutil.Summarise(receives), Unit: "recv"})
	rows = append(rows, benchutil.CostRows("e2e ledger", o.queue, "app role", system, costs, true)...)
	rows = append(rows, benchutil.Row{Name: "e2e duplicate sends (sandbox), " + o.queue, Value: benchutil.One(float64(dups)), Unit: "sends",
		Target: "0", Pass: benchutil.Check(dups == 0)})
	return append(rows, rssRows("during e2e, "+o.queue, peak)...)
}

// rssRows reports the sweeper's peak RSS and the largest worker's.
func rssRows(during string, peak map[string]float64) []benchutil.Row {
	if len(peak) == 0 {
		return nil
	}
	var worker float64
	for k, v := range peak {
		if strings.HasPrefix(k, "worker") {
			worker = max(worker, v)
		}
	}
	return []benchutil.Row{
		{Name: "peak RSS (VmHWM), bin/sweeper, " + during, Value: benchutil.One(peak["sweeper"]), Unit: "MiB",
			Target: fmt.Sprintf("≤ %d", rssTarget), Pass: benchutil.Check(peak["sweeper"] <= rssTarget)},
		{Name: "peak RSS (VmHWM), largest bin/worker, " + during, Value: benchutil.One(worker), Unit: "MiB",
			Target: fmt.Sprintf("≤ %d", rssTarget), Pass: benchutil.Check(worker <= rssTarget)},
	}
}

// once schedules the rows on a fresh database and times their delivery.
func once(ctx context.Context, o opts) (result, error) {
	var res result
	db, err := benchutil.NewDB(ctx)
	if err != nil {
		return res, err
	}
	defer db.Close()
	fmt.Fprintf(os.Stderr, "bench/e2e: scheduling %d rows…\n", o.rows)
	due := time.Now().Add(-time.Second)
	if err := benchutil.Schedule(ctx, ledger.New(db.App, nil), "ref", o.rows, tenants, func(int) time.Time { return due }); err != nil {
		return res, err
	}
	db.FlushApp()
	var elapsed time.Duration
	var sb *sandbox.Server
	var before benchutil.PGCounters
	var rec benchutil.Receives
	if o.processes {
		st, err := stack.Start(ctx, stack.Config{DB: db, Bin: o.bin, Queue: o.queue, Workers: o.workers, Concurrency: o.concurrency,
			SandboxRate: stack.UnthrottledRate, SandboxBurst: stack.UnthrottledBurst, MaxSends: o.rows + 1000, SweepBatch: 500, PublishAhead: time.Minute,
			Env: o.env})
		if err != nil {
			return res, err
		}
		defer st.Stop()
		sb = st.Sandbox
		// Idle processes' start-up statements are flushed by now.
		time.Sleep(2 * time.Second)
		if before, err = db.Counters(ctx); err != nil {
			return res, err
		}
		start := time.Now()
		for {
			r, err := st.Sweep(ctx)
			if err != nil {
				return res, err
			}
			if r.Leased == 0 {
				break
			}
		}
		// From here the cron keeps its minute (scaled to a second): a run
		// that left rows behind (a lease that has to run out) heals on a
		// later call, as it does in production.
		cronCtx, stopCron := context.WithCancel(ctx)
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-cronCtx.Done():
					return
				case <-t.C:
					st.Sweep(cronCtx)
				}
			}
		}()
		end, err := waitDelivered(ctx, db, sb, o.rows)
		stopCron()
		if err != nil {
			return res, err
		}
		elapsed = end.Sub(start)
		if rec, err = waitCounted(ctx, st, o.rows); err != nil {
			return res, err
		}
		if res.rss, err = st.PeakRSS(); err != nil {
			return res, err
		}
		// Exiting flushes each backend's statistics.
		st.Stop()
	} else {
		if before, err = db.Counters(ctx); err != nil {
			return res, err
		}
		if elapsed, sb, rec, err = inProcess(ctx, db, o); err != nil {
			return res, err
		}
		// The workers' pools are closed; the sweeper's sessions are the
		// application pool's, still open.
		db.FlushApp()
		time.Sleep(2 * time.Second)
	}
	after, err := db.Counters(ctx)
	if err != nil {
		return res, err
	}
	res.perSecond = float64(o.rows) / elapsed.Seconds()
	res.receivesPer = rec.PerDelivery()
	res.cost = benchutil.CostOf(before, after, o.rows)
	if o.breakdown {
		benchutil.Breakdown(os.Stderr, "bench/e2e: "+o.queue, before, after, o.rows)
	}
	res.duplicates = sb.Stats().Duplicates
	return res, nil
}

// waitDelivered watches the sandbox (no database cost) until every row was
// accepted, then the ledger until every row is settled.
// drainLimit bounds a run: a benchmark that stalls says so instead of
// hanging.
const drainLimit = 15 * time.Minute

func waitDelivered(ctx context.Context, db *benchutil.DB, sb *sandbox.Server, rows int) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, drainLimit)
	defer cancel()
	for sb.Stats().DistinctKeys < int64(rows) {
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d rows reached the sandbox within %s", sb.Stats().DistinctKeys, rows, drainLimit)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return db.WaitSettled(ctx, 20*time.Millisecond)
}

// countLimit bounds the wait for the workers' counters to catch up with the
// ledger: a worker counts a delivery just after its row is settled.
const countLimit = 30 * time.Second

// waitCounted reads the worker processes' receive counters once they count
// every row delivered.
func waitCounted(ctx context.Context, st *stack.Stack, rows int) (benchutil.Receives, error) {
	ctx, cancel := context.WithTimeout(ctx, countLimit)
	defer cancel()
	for {
		r, err := st.Receives(ctx)
		if err == nil && r.Delivered >= float64(rows) {
			return r, nil
		}
		if !clock.Sleep(ctx, 100*time.Millisecond) {
			return r, fmt.Errorf("the workers counted %.0f of %d rows delivered within %s (%v)", r.Delivered, rows, countLimit, err)
		}
	}
}

// inProcess drains the ledger with the queue server (but the local SQS
// server's process), sandbox, sweeper and worker pools all in this process,
// and returns the time it took, the sandbox and the workers' receives.
func inProcess(ctx context.Context, db *benchutil.DB, o opts) (time.Duration, *sandbox.Server, benchutil.Receives, error) {
	var rec benchutil.Receives
	qs, err := stack.StartQueue(ctx, o.queue)
	if err != nil {
		return 0, nil, rec, err
	}
	defer qs.Stop()
	open := func() (queue.Queue, error) { return backends.Open(ctx, qs.Config, zerolog.Nop()) }
	sb, ssrv, err := stack.StartSandbox(stack.UnthrottledRate, stack.UnthrottledBurst, o.rows+1000)
	if err != nil {
		return 0, nil, rec, err
	}
	defer ssrv.Close()
	// One set of worker metrics for every pool: their counters add up.
	reg := prometheus.NewRegistry()
	metrics := worker.NewMetrics(reg)

	start := time.Now()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{}, o.workers)
	for i := 0; i < o.workers; i++ {
		pool, err := sql.Open("postgres", db.AppURL)
		if err != nil {
			return 0, nil, rec, err
		}
		pool.SetMaxOpenConns(o.concurrency + 4)
		pool.SetMaxIdleConns(o.concurrency + 4)
		defer pool.Close()
		q, err := open()
		if err != nil {
			return 0, nil, rec, err
		}
		defer q.Close()
		sender, err := webhook.New(webhook.Config{URL: ssrv.URL + "/send", Name: "sandbox"})
		if err != nil {
			return 0, nil, rec, err
		}
		paces := worker.Paces(pool, pace.Unlimited)
		w, err := worker.New(worker.Options{Ledger: ledger.New(pool, nil), Queue: q, Log: zerolog.Nop(),
			Route: func(string) (provider.Sender, error) { return sender, nil }, Pace: paces, Metrics: metrics,
			Concurrency: o.concurrency, ShutdownTimeout: 10 * time.Second})
		if err != nil {
			return 0, nil, rec, err
		}
		go func() { w.Run(wctx); done <- struct{}{} }()
	}
	sq, err := open()
	if err != nil {
		return 0, nil, rec, err
	}
	defer sq.Close()
	sw, err := sweep.New(ledger.New(db.App, nil), sq, sweep.Config{Batch: 500, Budget: 50 * time.Second, PublishAhead: time.Minute,
		RequeueAfter: 10 * time.Minute, KeyPrefix: "owed-"}, zerolog.Nop())
	if err != nil {
		return 0, nil, rec, err
	}
	for {
		res, err := sw.Run(ctx)
		if err != nil {
			return 0, nil, rec, err
		}
		if res.Leased == 0 {
			break
		}
	}
	end, err := waitDelivered(ctx, db, sb, o.rows)
	if err != nil {
		return 0, nil, rec, err
	}
	stop()
	for i := 0; i < o.workers; i++ {
		<-done
	}
	rec, err = benchutil.GatherReceives(reg)
	return end.Sub(start), sb, rec, err
}
