// Command river measures River (github.com/riverqueue/river), owed's peer,
// on bench/e2e's work, so `make bench` compares the two in the same sitting
// on the same server: N jobs due now, each one HTTP POST to the sandbox
// provider, recorded complete. It runs River once with its defaults and once
// tuned (FetchCooldown 5 ms, FetchPollInterval 100 ms), 200 workers in one
// process as River tuned ran for issue 15's figures, and reports each run as
// bench/e2e reports owed's: deliveries per second, and per delivery the
// transactions, statements, Postgres execution time, Postgres server CPU,
// the CPU outside Postgres (this process's sandbox provider and the exited
// `work` peer), the machine's CPU (both) and the non-HOT updates of River's
// database (benchutil.CostRows).
//
// River itself runs in bench/peers/river, a module of its own (River and pgx
// stay out of owed's go.mod), as a child process: `setup` migrates a fresh
// empty database with rivermigrate and inserts the jobs, then, with that
// process gone and the counters read, `work` runs the client until River
// has recorded every job complete and prints how long that took from the
// client's start. The sandbox runs here, on loopback, built as bench/e2e
// builds it for owed's workers, and the peer sends through owed's own
// webhook adapter, so the HTTP side is identical. The counters count every
// role's statements in River's database: nothing but River connects to it.
//
//	scripts/with-postgres.sh go run ./bench/river -rows 10000
//	BENCH_QUICK=1 scripts/bench.sh -only e2e,river     # beside owed's e2e
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/bench/internal/stack"
	"github.com/owedhq/owed/internal/clock"
)

const (
	// peerSource is the nested module's folder, built when -peer is empty.
	peerSource = "bench/peers/river"
	// flushWait bounds the wait for the peer's backends to exit, which
	// flushes their statistics, before the counters are read.
	flushWait = 30 * time.Second
)

// modes are River's two configurations, in the order they run.
var modes = []string{"defaults", "tuned"}

type opts struct {
	rows, workers, maxConns, runs int
	peer                          string
	modes                         []string
	breakdown                     bool
}

// result is one run's figures.
type result struct {
	perSecond  float64
	cost       benchutil.Cost
	duplicates int64
}

// peerResult is what the peer's work step prints.
type peerResult struct {
	Seconds   float64 `json:"seconds"`
	Completed int     `json:"completed"`
	Failed    int     `json:"failed"`
}

func main() { benchutil.Main("bench/river", run) }

func run() error {
	var o opts
	flag.IntVar(&o.rows, "rows", 20000, "jobs due now")
	flag.IntVar(&o.workers, "workers", 200, "River's MaxWorkers on its one queue")
	flag.IntVar(&o.maxConns, "max-conns", 0, "the peer's pgx pool size; 0 keeps pgxpool's default (max(4, cores))")
	flag.IntVar(&o.runs, "runs", 1, "repetitions of each mode, each on a fresh database")
	flag.BoolVar(&o.breakdown, "breakdown", false, "write each run's statements and table writes per delivery to stderr (benchutil.Breakdown)")
	flag.StringVar(&o.peer, "peer", "", "the built bench/peers/river program; empty builds it from "+peerSource)
	only := flag.String("modes", strings.Join(modes, ","), "River's configurations to run: defaults, tuned")
	flag.Parse()
	for _, m := range strings.Split(*only, ",") {
		if !slices.Contains(modes, m) {
			return fmt.Errorf("-modes: %q is not one of %s", m, strings.Join(modes, ", "))
		}
		o.modes = append(o.modes, m)
	}
	if o.peer == "" {
		dir, err := os.MkdirTemp("", "owed-bench-river-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if o.peer, err = buildPeer(dir); err != nil {
			return err
		}
	}
	ctx := context.Background()
	var rows []benchutil.Row
	for _, mode := range o.modes {
		var rate []float64
		var costs []benchutil.Cost
		var dups int64
		for r := 0; r < o.runs; r++ {
			res, err := once(ctx, o, mode)
			if err != nil {
				return fmt.Errorf("River %s: %w", mode, err)
			}
			fmt.Fprintf(os.Stderr, "bench/river: %s run %d: %.0f deliveries/s, %.2f transactions, %.2f statements, %.1f µs Postgres execution, %.1f µs Postgres server CPU, %.1f µs CPU outside Postgres, %.1f µs machine CPU and %.2f non-HOT updates per delivery\n",
				mode, r+1, res.perSecond, res.cost.Xacts, res.cost.Statements, res.cost.ExecMicros, res.cost.ServerCPUMicros, res.cost.OutsideCPUMicros, res.cost.MachineCPUMicros, res.cost.NonHOT)
			rate, costs, dups = append(rate, res.perSecond), append(costs, res.cost), dups+res.duplicates
		}
		rows = append(rows, report(o, mode, rate, costs, dups)...)
	}
	benchutil.Report(rows)
	return nil
}

// buildPeer builds the nested module's program into dir.
func buildPeer(dir string) (string, error) {
	bin := filepath.Join(dir, "river-peer")
	src, err := filepath.Abs(peerSource)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		return "", fmt.Errorf("%w: run from the repository's root, or pass -peer", err)
	}
	fmt.Fprintln(os.Stderr, "bench/river: building", peerSource)
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir, cmd.Stdout, cmd.Stderr = src, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w", peerSource, err)
	}
	return bin, nil
}

func report(o opts, mode string, rate []float64, costs []benchutil.Cost, dups int64) []benchutil.Row {
	system := "River " + mode
	rows := []benchutil.Row{{Name: fmt.Sprintf("river deliveries/s, %s, %d jobs, 1 process × %d workers", mode, o.rows, o.workers),
		Value: benchutil.Summarise(rate), Unit: "/s", System: system, Column: benchutil.ColDeliveries}}
	rows = append(rows, benchutil.CostRows("river", mode, "every role", system, costs, false)...)
	return append(rows, benchutil.Row{Name: "river duplicate sends (sandbox), " + mode, Value: benchutil.One(float64(dups)), Unit: "sends",
		Target: "0", Pass: benchutil.Check(dups == 0)})
}

// once runs River in mode on a fresh database and times the drain.
func once(ctx context.Context, o opts, mode string) (result, error) {
	var res result
	db, err := benchutil.NewEmptyDB(ctx, "river_bench")
	if err != nil {
		return res, err
	}
	defer db.Close()
	fmt.Fprintf(os.Stderr, "bench/river: migrating and inserting %d jobs…\n", o.rows)
	common := []string{"-database-url", db.URL, "-rows", strconv.Itoa(o.rows), "-max-conns", strconv.Itoa(o.maxConns)}
	if _, err := peer(ctx, o.peer, append(common, "setup")...); err != nil {
		return res, err
	}
	sb, ssrv, err := stack.StartSandbox(stack.UnthrottledRate, stack.UnthrottledBurst, o.rows+1000)
	if err != nil {
		return res, err
	}
	defer ssrv.Close()
	if err := waitBackendsGone(ctx, db); err != nil {
		return res, err
	}
	before, err := benchutil.ReadCounters(ctx, db.Owner, "")
	if err != nil {
		return res, err
	}
	args := slices.Concat(common, []string{"-provider", ssrv.URL, "-workers", strconv.Itoa(o.workers)})
	if mode == "tuned" {
		args = append(args, "-tuned")
	}
	out, err := peer(ctx, o.peer, append(args, "work")...)
	if err != nil {
		return res, err
	}
	var pr peerResult
	if err := json.Unmarshal(out, &pr); err != nil {
		return res, fmt.Errorf("the peer's answer %q: %w", out, err)
	}
	if err := waitBackendsGone(ctx, db); err != nil {
		return res, err
	}
	after, err := benchutil.ReadCounters(ctx, db.Owner, "")
	if err != nil {
		return res, err
	}
	// Checked after the counters are read, so the check is not counted.
	var completed int
	if err := db.Owner.QueryRowContext(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed); err != nil {
		return res, err
	}
	st := sb.Stats()
	if completed != o.rows || st.DistinctKeys != int64(o.rows) {
		return res, fmt.Errorf("%d jobs recorded complete and %d distinct sends accepted, want %d of each", completed, st.DistinctKeys, o.rows)
	}
	if pr.Failed > 0 {
		fmt.Fprintf(os.Stderr, "bench/river: %s: %d job attempts failed and were retried\n", mode, pr.Failed)
	}
	res.perSecond = float64(o.rows) / pr.Seconds
	res.cost = benchutil.CostOf(before, after, o.rows)
	if o.breakdown {
		benchutil.Breakdown(os.Stderr, "bench/river: "+mode, before, after, o.rows)
	}
	res.duplicates = st.Duplicates
	return res, nil
}

// peer runs the River program bin with args and returns what it printed.
func peer(ctx context.Context, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", filepath.Base(bin), args[len(args)-1], err)
	}
	return bytes.TrimSpace(out.Bytes()), nil
}

// waitBackendsGone waits until no other session is connected to the
// database: a backend flushes its statistics as it exits, so the counters
// read after this include everything the peer's sessions did.
func waitBackendsGone(ctx context.Context, db *benchutil.EmptyDB) error {
	ctx, cancel := context.WithTimeout(ctx, flushWait)
	defer cancel()
	for {
		var others int
		if err := db.Owner.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others); err != nil {
			return err
		}
		if others == 0 {
			return nil
		}
		if !clock.Sleep(ctx, 50*time.Millisecond) {
			return errors.New("the peer's sessions were still connected " + flushWait.String() + " after it exited")
		}
	}
}
