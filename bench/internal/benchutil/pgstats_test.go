package benchutil

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestProcStatReadsTheParentAndTheTicks(t *testing.T) {
	parent, ticks, err := procStat(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if parent != os.Getppid() {
		t.Errorf("parent = %d, want %d", parent, os.Getppid())
	}
	if ticks < 0 {
		t.Errorf("ticks = %d, want ≥ 0", ticks)
	}
}

func TestCostOfDividesTheGrowthAndKeepsUnknownsUnknown(t *testing.T) {
	before := PGCounters{Xacts: 10, Statements: 100, ExecMs: 5, NonHOT: 7, ServerCPU: time.Second}
	after := PGCounters{Xacts: 210, Statements: 500, ExecMs: 25, NonHOT: 407, ServerCPU: 3 * time.Second}
	c := CostOf(before, after, 200)
	if c.Xacts != 1 || c.Statements != 2 || c.ExecMicros != 100 || c.NonHOT != 2 || c.ServerCPUMicros != 10000 {
		t.Errorf("CostOf = %+v, want 1 xact, 2 statements, 100 µs, 2 non-HOT, 10000 µs CPU", c)
	}
	before.Statements, before.ServerCPU = -1, -1
	if c := CostOf(before, after, 200); c.Statements != -1 || c.ExecMicros != -1 || c.ServerCPUMicros != -1 {
		t.Errorf("CostOf without pg_stat_statements or /proc = %+v, want -1 for those", c)
	}
}

func TestPeersDividesByRiverTuned(t *testing.T) {
	rows := []Row{
		{Name: "owed", Value: One(3000), System: "owed rest", Column: ColDeliveries},
		{Name: "owed xact", Value: One(0.25), System: "owed rest", Column: ColXacts},
		{Name: "river", Value: One(6000), System: Reference, Column: ColDeliveries},
		{Name: "not a peer figure", Value: One(1)},
	}
	var b strings.Builder
	fprintPeers(&b, rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want a title, a header and 2 systems:\n%s", len(lines), b.String())
	}
	if f := strings.Fields(lines[2]); f[0] != "owed" || f[4] != "0.50×" {
		t.Errorf("owed's line = %q, want 3000/s at 0.50× River tuned", lines[2])
	}
	if !strings.Contains(lines[2], "0.250") || !strings.Contains(lines[3], "1.00×") {
		t.Errorf("lines = %q, want owed's 0.250 transactions and River tuned at 1.00×", lines[2:])
	}
}

func TestCostOfAddsTheProcessesToTheServer(t *testing.T) {
	before := PGCounters{ServerCPU: time.Second, ProcessCPU: 2 * time.Second}
	after := PGCounters{ServerCPU: 3 * time.Second, ProcessCPU: 3 * time.Second}
	c := CostOf(before, after, 1000)
	if c.ServerCPUMicros != 2000 || c.OutsideCPUMicros != 1000 || c.MachineCPUMicros != 3000 {
		t.Errorf("CostOf = %+v, want 2000 µs server, 1000 µs outside, 3000 µs machine", c)
	}
	before.ProcessCPU = -1
	if c := CostOf(before, after, 1000); c.OutsideCPUMicros != -1 || c.MachineCPUMicros != -1 {
		t.Errorf("CostOf without getrusage = %+v, want -1 outside and machine", c)
	}
	before.ProcessCPU, before.ServerCPU = 2*time.Second, -1
	if c := CostOf(before, after, 1000); c.OutsideCPUMicros != 1000 || c.MachineCPUMicros != -1 {
		t.Errorf("CostOf without /proc = %+v, want 1000 µs outside and machine -1", c)
	}
}

func TestProcessCPUGrowsWithWork(t *testing.T) {
	before := ProcessCPU()
	if before < 0 {
		t.Fatalf("ProcessCPU = %v, want ≥ 0 on Linux", before)
	}
	// Each pass spins before it reads again, so a pass that ran used CPU;
	// the deadline only ends a wait for a counter that never moves.
	for deadline := time.Now().Add(time.Minute); ProcessCPU() == before; {
		if time.Now().After(deadline) {
			t.Fatalf("ProcessCPU stayed %v through a minute of work", before)
		}
		for i := 0; i < 1_000_000; i++ {
			spin += i
		}
	}
}

// spin keeps TestProcessCPUGrowsWithWork's loop from being compiled away.
var spin int

func TestPeersPrintTheCoresBusy(t *testing.T) {
	rows := []Row{
		{Name: "owed", Value: One(1000), System: "owed rest", Column: ColDeliveries},
		{Name: "owed machine", Value: One(1500), System: "owed rest", Column: ColMachineCPU},
		{Name: "river", Value: One(5000), System: Reference, Column: ColDeliveries},
	}
	var b strings.Builder
	fprintPeers(&b, rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want a title, a header and 2 systems:\n%s", len(lines), b.String())
	}
	if !strings.HasSuffix(lines[1], colCores) {
		t.Errorf("header = %q, want it to end with %q", lines[1], colCores)
	}
	if f := strings.Fields(lines[2]); f[len(f)-1] != "1.50" {
		t.Errorf("owed's line = %q, want 1.50 cores busy (1000/s × 1500 µs)", lines[2])
	}
	if f := strings.Fields(lines[3]); f[len(f)-1] != "-" {
		t.Errorf("River's line = %q, want - cores busy without a machine CPU", lines[3])
	}
}
