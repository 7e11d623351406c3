package drill

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/devstack"
	"github.com/owedhq/owed/internal/devstack/devstacktest"
)

// TestDrill is the bounded drill of make test: 2,500 rows, every fault
// class at least once (worker and sweeper kills, a queue restart, a
// PostgreSQL restart, 5xx, timeouts, a 429 storm, a permanent recipient,
// redelivery, publish 503s, a scheduler pause, two sweepers and four
// workers), and every invariant checked, the secrets-in-logs one included.
func TestDrill(t *testing.T) {
	if _, err := devstack.FindPostgres(); err != nil {
		t.Skipf("skipping: the drill runs a throwaway PostgreSQL: %v", err)
	}
	if testing.Short() {
		t.Skip("skipping the drill in -short mode: it runs the whole stack for about two minutes")
	}
	tmp := devstacktest.TempDir(t, "owed-drill-")
	bin := devstacktest.BuildBinaries(t, tmp)
	out := &devstacktest.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, Config{Dir: filepath.Join(tmp, "drill"), BinDir: bin, Rows: 2500, Faults: AllFaults,
		Spread: 40 * time.Second, DurationLimit: 150 * time.Second, Pause: 10 * time.Second, Storm: 6 * time.Second, Out: out})
	if err != nil {
		t.Fatalf("drill: %v\n%s", err, out.String())
	}
	var table bytes.Buffer
	res.Table(&table)
	t.Logf("drill took %s\n%s\n%s", time.Since(start).Round(time.Second), out.String(), table.String())
	for _, v := range res.Violations {
		t.Errorf("invariant broken: %s", v)
	}
	// Every fault class must have fired, or the drill proved less than it
	// says.
	for _, what := range []string{"worker kill -9", "queue restart (kill -9)", "postgres restart", "429 storm",
		"scheduler pause", "rows cancelled"} {
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
	all, err := ParseFaults("all")
	if err != nil || len(all) != len(AllFaults) {
		t.Fatalf("all: %v, %v", all, err)
	}
	got, err := ParseFaults("worker-kill, scale,worker-kill")
	if err != nil || len(got) != 2 || got[0] != WorkerKill || got[1] != Scale {
		t.Errorf("got %v, %v; want [worker-kill scale]", got, err)
	}
	if _, err := ParseFaults("worker-kil"); err == nil || !strings.Contains(err.Error(), "worker-kill") {
		t.Errorf("a misspelt fault: %v, want an error listing the faults", err)
	}
}
