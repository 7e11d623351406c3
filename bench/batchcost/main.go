// Command batchcost measures what each statement of a delivery costs
// PostgreSQL, per row: it schedules -rows rows due now (20 tenants, as
// bench/e2e does), leases them 500 at a time as the sweep does, then claims,
// checks before the send (StartSends) and settles them delivered in worker
// batches of -b rows, all on one connection, and reads that backend's CPU
// from /proc around each statement. Run it as root or as the server's OS
// user on the server's machine, under scripts/with-postgres.sh:
//
//	scripts/with-postgres.sh go run ./bench/batchcost -rows 10000 -b 26
//
// -pause prints the backend's pid and waits 3 s before the step it names
// (lease or batches), for `perf record -g -p PID`. A benchmark: it prints
// numbers and never fails on them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/internal/ledger"
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/batchcost:", err)
		os.Exit(1)
	}
}

// tck is the kernel's clock ticks per second (USER_HZ), the unit of
// /proc/PID/stat's utime and stime: 100 on Linux.
var tck = 100.0

var names = map[string]string{"lease": "lease (500 a slice)", "claim": "claim", "start": "check before the send",
	"settle": "settle delivered"}

func backendCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	must(err)
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	u, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return float64(u+st) / tck
}

func main() {
	rows := flag.Int("rows", 10000, "rows")
	batch := flag.Int("b", 26, "worker batch")
	keep := flag.Bool("keep", false, "keep the database (its URL is printed)")
	pause := flag.String("pause", "", "print the backend's pid and wait 3 s before this step: lease or batches")
	flag.Parse()
	ctx := context.Background()
	db, err := benchutil.NewDB(ctx)
	must(err)
	if !*keep {
		defer db.Close()
	} else {
		fmt.Println("db", db.Name, db.AppURL)
	}
	due := time.Now().Add(-time.Second)
	must(benchutil.Schedule(ctx, ledger.New(db.App, nil), "ref", *rows, 20, func(int) time.Time { return due }))
	db.App.SetMaxOpenConns(1)
	db.App.SetMaxIdleConns(1)
	l := ledger.New(db.App, nil)
	var pid int
	must(db.App.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	cpu := map[string]float64{}
	wall := map[string]time.Duration{}
	measure := func(name string, fn func()) {
		c0 := backendCPU(pid)
		t0 := time.Now()
		fn()
		wall[name] += time.Since(t0)
		cpu[name] += backendCPU(pid) - c0
	}
	if *pause == "lease" {
		fmt.Fprintf(os.Stderr, "pid %d\n", pid)
		time.Sleep(3 * time.Second)
	}
	var leased []ledger.Leased
	for len(leased) < *rows {
		var got []ledger.Leased
		measure("lease", func() {
			got, err = l.Lease(ctx, ledger.LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute, RequeueAfter: 10 * time.Minute})
			must(err)
		})
		if len(got) == 0 {
			must(fmt.Errorf("nothing leased after %d rows", len(leased)))
		}
		leased = append(leased, got...)
	}
	if *pause == "batches" {
		fmt.Fprintf(os.Stderr, "pid %d\n", pid)
		time.Sleep(3 * time.Second)
	}
	for i := 0; i < len(leased); i += *batch {
		part := leased[i:min(i+*batch, len(leased))]
		reqs := make([]ledger.ClaimRequest, len(part))
		for j, r := range part {
			reqs[j] = ledger.ClaimRequest{Tenant: r.Tenant, ID: r.ID, DueAt: r.DueAt}
		}
		var claims []ledger.Claim
		var errs []error
		measure("claim", func() {
			claims, errs, err = l.ClaimForSendBatch(ctx, reqs, ledger.ClaimParams{LeaseFor: 75 * time.Second, EarlyTolerance: time.Hour, Revocable: true})
			must(err)
		})
		holds := make([]ledger.Hold, 0, len(claims))
		for j, c := range claims {
			if errs[j] != nil || c.Outcome != ledger.ClaimSend {
				must(fmt.Errorf("claim of row %d: %v %v", reqs[j].ID, c.Outcome, errs[j]))
			}
			holds = append(holds, c.Hold)
		}
		measure("start", func() {
			errs, err = l.StartSends(ctx, holds, 75*time.Second, 45*time.Second)
			must(err)
		})
		now := time.Now()
		settle := make([]ledger.Delivered, 0, len(claims))
		for _, c := range claims {
			settle = append(settle, ledger.Delivered{Hold: c.Hold, Attempt: ledger.Attempt{Attempt: 1,
				Provider: "sandbox", StartedAt: now, FinishedAt: now, Outcome: ledger.AttemptAccepted,
				ProviderMessageID: fmt.Sprintf("probe-%d", c.Hold.ID), HTTPStatus: 200}})
		}
		measure("settle", func() {
			_, errs, err = l.SettleDeliveredBatch(ctx, settle)
			must(err)
		})
		for _, e := range errs {
			must(e)
		}
	}
	n := float64(*rows)
	fmt.Printf("batchcost: %d rows, worker batches of %d, the backend's CPU and the wall time per row\n", *rows, *batch)
	total := 0.0
	for _, k := range []string{"lease", "claim", "start", "settle"} {
		total += cpu[k] / n * 1e6
		fmt.Printf("%-24s cpu %6.1f µs/row  wall %6.1f µs/row\n", names[k], cpu[k]/n*1e6, float64(wall[k].Microseconds())/n)
	}
	fmt.Printf("%-24s cpu %6.1f µs/row\n", "all four", total)
}
