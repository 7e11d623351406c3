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
