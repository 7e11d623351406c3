// Command all runs every benchmark program with -json and the worker's Go
// benchmark (BenchmarkDeliver), and prints their rows as one table. It
// expects the programs built into -dir (scripts/bench.sh does that) and the
// environment of scripts/with-postgres.sh. The end-to-end and
// provider-limited runs repeat on every queue backend (rest, jetstream, and
// sqs when owed-sqs-server is installed), their rows named after it.
// -quick picks smaller sizes; -only runs some of the programs. Issue 15's
// four benchmarks are burst (a 100,000-row burst under a strict minute
// cron), immediate (rows due now through the API, no cron), e2e, and
// limitedsweep (the provider-limited run under a minute cron and the fast
// path, with a requeue backlog). bench/river runs River, the peer, on the
// end-to-end work right after owed's e2e runs, with its defaults and tuned
// (the river-peer program built from the nested module bench/peers/river
// into -dir), and the table of owed beside River follows the main one
// (benchutil.PrintPeers): deliveries/s, owed ÷ River tuned, and per delivery
// the Postgres time and CPU, statements, transactions and non-HOT updates.
// fairness is issue 25's (a tenant's flood, another's nudges and a paused
// tenant on a paced and an unpaced account).
//
//	scripts/bench.sh            # or: make bench, BENCH_QUICK=1 make bench
//	BENCH_QUICK=1 scripts/bench.sh -only e2e,limited
//	scripts/bench.sh -only burst,immediate,e2e,limitedsweep
//	BENCH_QUICK=1 scripts/bench.sh -only e2e,river     # owed beside River
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
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
	"github.com/owedhq/owed/internal/queue/backends"
)

func main() {
	dir := flag.String("dir", "", "folder holding the built benchmark programs and bin/sweeper, bin/worker")
	quick := flag.Bool("quick", false, "smaller sizes, about nine minutes")
	only := flag.String("only", "", "comma-separated programs to run (e2e,limited,…; deliver is BenchmarkDeliver); empty runs all")
	flag.Parse()
	want := func(name string) bool { return *only == "" || slices.Contains(strings.Split(*only, ","), name) }
	bin := "-bin=" + *dir
	steps := [][]string{
		{"sweep", "-runs=11", "-sizes=10000,1000000", "-naive-max=1000000"},
		{"queue", "-runs=3"},
		{"pace"},
		{"ledgerscale", "-runs=5", "-sizes=1000000,20000000"},
	}
	after := [][]string{{"lag", bin}, {"recovery", bin, "-runs=3"}, {"burst", bin}, {"limitedsweep", bin}, {"fairness", bin}}
	if *quick {
		steps = [][]string{
			{"sweep", "-runs=5", "-sizes=10000,100000", "-naive-max=100000"},
			{"queue", "-runs=1", "-messages=5000"},
			{"pace", "-duration=10s"},
			{"ledgerscale", "-runs=3", "-sizes=100000,1000000"},
		}
		after = [][]string{{"lag", bin, "-rows=500", "-window=1m"}, {"recovery", bin, "-runs=1"}, {"burst", bin, "-rows=20000"},
			{"limitedsweep", bin, "-duration=1m"}, {"fairness", bin, "-rows=12000", "-nudges=400", "-paused=2000"}}
	}
	steps = append(append(steps, perQueue(*dir, *quick)...), after...)
	steps = append(steps, []string{"immediate", bin})
	var rows []benchutil.Row
	failed := false
	for _, s := range steps {
		if !want(s[0]) {
			continue
		}
		fmt.Fprintf(os.Stderr, "== bench/%s %s\n", s[0], strings.Join(s[1:], " "))
		start := time.Now()
		cmd := exec.Command(filepath.Join(*dir, s[0]), append([]string{"-json"}, s[1:]...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Run(); err != nil {
			// One broken benchmark leaves the others' figures worth printing.
			fmt.Fprintf(os.Stderr, "bench/all: bench/%s: %v\n", s[0], err)
			failed = true
		}
		got, err := parse(&out)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench/all: bench/%s output: %v\n", s[0], err)
			failed = true
		}
		rows = append(rows, got...)
		fmt.Fprintf(os.Stderr, "== bench/%s took %s\n", s[0], time.Since(start).Round(time.Second))
	}
	if want("deliver") {
		got, err := deliverBench(*quick)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/all: BenchmarkDeliver:", err)
			failed = true
		}
		rows = append(rows, got...)
	}
	fmt.Println()
	benchutil.Print(rows)
	fmt.Println()
	benchutil.PrintPeers(rows)
	if err := stack.CheckQueue(backends.SQS); err != nil {
		fmt.Printf("\nno sqs rows: %v\n", err)
	}
	if failed {
		os.Exit(1)
	}
}

// perQueue is the end-to-end run on every queue backend (bench/e2e skips
// sqs when the local SQS server is not installed), River on the same work
// and size as owed's rest and jetstream runs, then the provider-limited
// run: as designed on rest with the inline sender beside it, and with 64
// senders a worker (more sends in flight than the pace's max wait) on every
// backend, which is where receives per delivery tells.
func perQueue(dir string, quick bool) [][]string {
	bin := "-bin=" + dir
	rows := map[string]string{backends.REST: "-rows=100000", backends.JetStream: "-rows=100000", backends.SQS: "-rows=20000"}
	e2eRuns, limited, deep := "-runs=3", "-duration=2m", "-duration=1m"
	if quick {
		rows = map[string]string{backends.REST: "-rows=20000", backends.JetStream: "-rows=20000", backends.SQS: "-rows=5000"}
		e2eRuns, limited, deep = "-runs=1", "-duration=30s", "-duration=30s"
	}
	var steps [][]string
	for _, q := range backends.Names {
		runs := e2eRuns
		if q == backends.SQS {
			// The local SQS server is indicative only: one run is enough.
			runs = "-runs=1"
		}
		steps = append(steps, []string{"e2e", "-processes", bin, "-queue=" + q, rows[q], runs})
	}
	steps = append(steps, []string{"river", "-peer=" + filepath.Join(dir, "river-peer"), rows[backends.REST], e2eRuns})
	steps = append(steps, []string{"limited", bin, limited})
	for _, q := range backends.Names {
		steps = append(steps, []string{"limited", bin, "-queue=" + q, "-concurrency=64", "-inline=false", deep})
	}
	return steps
}

func parse(out *bytes.Buffer) ([]benchutil.Row, error) {
	var rows []benchutil.Row
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var r benchutil.Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return rows, fmt.Errorf("%q: %w", sc.Text(), err)
		}
		rows = append(rows, r)
	}
	return rows, sc.Err()
}

// deliverBench runs BenchmarkDeliver with -benchmem, -count times, and
// reports the medians of its ns/op, B/op and allocs/op.
func deliverBench(quick bool) ([]benchutil.Row, error) {
	count := "5"
	if quick {
		count = "2"
	}
	fmt.Fprintln(os.Stderr, "== go test -run '^$' -bench BenchmarkDeliver -benchmem -count", count, "./internal/worker")
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "BenchmarkDeliver", "-benchmem", "-count", count, "./internal/worker")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, out)
	}
	// "BenchmarkDeliver-2   2000   612345 ns/op   23456 B/op   321 allocs/op"
	vals := map[string][]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkDeliver") {
			continue
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				vals[f[i+1]] = append(vals[f[i+1]], v)
			}
		}
	}
	if len(vals["allocs/op"]) == 0 {
		return nil, fmt.Errorf("no BenchmarkDeliver result in:\n%s", out)
	}
	ns := benchutil.Summarise(vals["ns/op"])
	return []benchutil.Row{
		{Name: "BenchmarkDeliver: worker hot path, allocations per delivery", Value: benchutil.Summarise(vals["allocs/op"]), Unit: "allocs"},
		{Name: "BenchmarkDeliver: bytes allocated per delivery", Value: benchutil.Summarise(vals["B/op"]), Unit: "B"},
		{Name: "BenchmarkDeliver: wall time per delivery (1 worker × 16)", Value: benchutil.Summary{Median: ns.Median / 1e6, Min: ns.Min / 1e6, Max: ns.Max / 1e6, N: ns.N}, Unit: "ms"},
	}, nil
}
