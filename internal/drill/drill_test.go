package drill

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/devstack"
	"github.com/owedhq/owed/internal/devstack/devstacktest"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/testenv"
)

// The tests' drills drain for as long as rows keep settling: a loaded
// machine (two test runs on two cores) drained TestDrill steadily from
// 2,174 rows to 216 and was cut off by a fixed 150 s limit, a limit on
// wall time that said nothing about the ledger. A drain that settles no
// row for testStallLimit is stuck, and fails with its rows described.
const (
	testDrainLimit = 20 * time.Minute
	testStallLimit = 3 * time.Minute
)

// TestDrill is the bounded drill of make test: 2,500 rows, every fault
// class at least once (worker and sweeper kills, a queue restart, a
// PostgreSQL restart, three PostgreSQL crashes by kill -9 of the postmaster
// and by pg_ctl stop -m immediate, a failover to a synchronous standby,
// 5xx, timeouts, a 429 storm, a permanent recipient, redelivery, publish
// 503s, a scheduler pause, two sweepers and four workers), and every
// invariant checked, the secrets-in-logs one included.
func TestDrill(t *testing.T) {
	res := runDrill(t, Config{Rows: 2500, Faults: AllFaults, Spread: 40 * time.Second, DurationLimit: testDrainLimit, StallLimit: testStallLimit,
		Pause: 10 * time.Second, Storm: 6 * time.Second})
	// Every fault class must have fired, or the drill proved less than it
	// says.
	for _, what := range []string{"worker kill -9", "queue restart (kill -9)", "postgres restart", "429 storm",
		"scheduler pause", "rows cancelled", crashCounted[devstack.CrashKill], crashCounted[devstack.CrashImmediate],
		"postgres failover"} {
		if res.Injected[what] == 0 {
			t.Errorf("%s was never injected: %v", what, res.Injected)
		}
	}
	if res.Injected["sweeper kill -9"]+res.Injected["sweeper kill -9 mid-catch-up"] == 0 {
		t.Errorf("no sweeper was killed: %v", res.Injected)
	}
	if res.Delivered < res.Scheduled/2 || res.Expired == 0 || res.Failed == 0 || res.Cancelled == 0 {
		t.Errorf("the workload did not end as planned: %+v", res)
	}
	// The secrets grep read real logs: an empty folder would pass it
	// vacuously.
	for _, name := range []string{"sandbox.log", "sweeper.log", "sweeper-2.log", "worker-1.log", "queue.log", "scheduler.log"} {
		if fi, err := os.Stat(filepath.Join(res.LogDir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("log %s is missing or empty (%v): the secrets check read nothing", name, err)
		}
	}
}

// TestDrillJetStream and TestDrillSQS are the bounded drills of the real
// queues: the JetStream server and the local SQS server are each killed -9
// twice while rows fall due and workers and sweepers are killed too, and
// every invariant must hold. The local SQS server keeps its messages in
// memory, so each kill loses what it held: the ledger republishes those rows
// once their leases run out.
func TestDrillJetStream(t *testing.T) { testQueueDrill(t, backends.JetStream) }

func TestDrillSQS(t *testing.T) { testQueueDrill(t, backends.SQS) }

func testQueueDrill(t *testing.T, queue string) {
	if queue == backends.SQS {
		if _, err := devstack.FindSQSServer(); err != nil {
			testenv.Missing(t, "the local SQS server", testenv.InstallSQS)
		}
	}
	res := runDrill(t, Config{Queue: queue, Rows: 600, Faults: []Fault{QueueRestart, WorkerKill, SweeperKill, ProviderPermanent},
		Spread: 20 * time.Second, DurationLimit: testDrainLimit, StallLimit: testStallLimit, Pause: 5 * time.Second, Storm: 3 * time.Second})
	if n := res.Injected["queue restart (kill -9)"]; n != 2 {
		t.Errorf("the %s server was killed %d times, want 2: %v", queue, n, res.Injected)
	}
	if res.Injected["worker kill -9"] == 0 || res.Injected["rows cancelled"] == 0 {
		t.Errorf("a worker kill or the cancellations were never injected: %v", res.Injected)
	}
	if res.Delivered < res.Scheduled/2 || res.Expired == 0 || res.Failed == 0 || res.Cancelled == 0 {
		t.Errorf("the workload did not end as planned: %+v", res)
	}
}

// runDrill runs one drill in a fresh folder with freshly built binaries,
// logs its table, and fails the test on every broken invariant.
func runDrill(t *testing.T, cfg Config) *Result {
	t.Helper()
	if _, err := devstack.FindPostgres(); err != nil {
		testenv.Missing(t, "PostgreSQL's server binaries (the drill runs a throwaway cluster)", testenv.InstallPostgres)
	}
	if testing.Short() {
		t.Skip("skipping the drill in -short mode: it runs the whole stack for a minute or two")
	}
	tmp := devstacktest.TempDir(t, "owed-drill-")
	cfg.Dir, cfg.BinDir = filepath.Join(tmp, "drill"), devstacktest.BuildBinaries(t, tmp)
	out := &devstacktest.Buffer{}
	cfg.Out = out
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("drill: %v\n%s", err, out.String())
	}
	var table bytes.Buffer
	res.Table(&table)
	t.Logf("drill took %s\n%s\n%s", time.Since(start).Round(time.Second), out.String(), table.String())
	for _, v := range res.Violations {
		t.Errorf("invariant broken: %s", v)
	}
	return res
}

// TestSecretsInLogs proves the grep finds a secret where one was logged.
func TestSecretsInLogs(t *testing.T) {
	dir := t.TempDir()
	ep := devstack.Endpoints{CronSecret: "cron-0123456789", QueueToken: "queue-0123456789", WebhookSecret: "whsec_c2lnbmluZ2tleQ=="}
	os.WriteFile(filepath.Join(dir, "worker-1.log"), []byte(`{"msg":"ok"}`+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "sweeper.log"), []byte(`{"auth":"Bearer cron-0123456789"}`+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "sandbox.log"), []byte(`{"key":"c2lnbmluZ2tleQ=="}`+"\n"), 0o644)
	found, err := secretsInLogs(dir, ep)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cron secret in sweeper.log", "webhook signing key in sandbox.log"}
	if strings.Join(found, "|") != strings.Join(want, "|") {
		t.Errorf("found %q, want %q", found, want)
	}
}

func TestParseFaults(t *testing.T) {
	all, err := ParseFaults("all", backends.REST)
	if err != nil || len(all) != len(AllFaults) {
		t.Fatalf("all: %v, %v", all, err)
	}
	got, err := ParseFaults("worker-kill, scale,worker-kill", backends.REST)
	if err != nil || len(got) != 2 || got[0] != WorkerKill || got[1] != Scale {
		t.Errorf("got %v, %v; want [worker-kill scale]", got, err)
	}
	if _, err := ParseFaults("worker-kil", backends.REST); err == nil || !strings.Contains(err.Error(), "worker-kill") {
		t.Errorf("a misspelt fault: %v, want an error listing the faults", err)
	}
	// A real queue cannot be told to redeliver or to refuse publishes:
	// "all" leaves those out, and naming one is refused.
	for _, q := range []string{backends.JetStream, backends.SQS} {
		all, err := ParseFaults("all", q)
		if err != nil || len(all) != len(AllFaults)-len(emulatorFaults) || slices.Contains(all, QueueRedelivery) ||
			!slices.Contains(all, QueueRestart) {
			t.Errorf("all on %s: %v, %v; want every fault but the emulator's", q, all, err)
		}
		if _, err := ParseFaults("queue-publish-503", q); err == nil || !strings.Contains(err.Error(), "--queue rest") {
			t.Errorf("queue-publish-503 on %s: %v; want an error saying only --queue rest injects it", q, err)
		}
	}
	cfg := Config{Queue: backends.SQS, Faults: []Fault{QueueRedelivery}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--queue rest") {
		t.Errorf("Validate with queue-redelivery on sqs = %v; want an error saying only --queue rest injects it", err)
	}
	if err := (Config{Queue: "kafka"}).Validate(); err == nil || !strings.Contains(err.Error(), "--queue") {
		t.Errorf("Validate with --queue kafka = %v; want an error naming --queue", err)
	}
}
