package upgrade_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/launch"
	"github.com/owedhq/owed/internal/migrate"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/stacktest"
)

const (
	cronSecret = "upgrade-cron-secret-0123456789"
	apiToken   = "upgrade-api-token-0123456789abc"
	tenantID   = "acme"
	// providerRate is the workers' pace and the sweepers' backpressure.
	providerRate = "2000/s"
	// settle bounds every wait for the system to reach a state: a poll's
	// deadline, never a measurement.
	settle = 3 * time.Minute
	// cronWhileSettling is how often checkSettled calls the sweepers'
	// cron while it waits.
	cronWhileSettling = 5 * time.Second
)

var ctx = context.Background()

// TestUpgradeAndRollback runs release N (testdata/release-n.txt) and N+1
// (this tree) against one database, with deliveries flowing the whole time:
// N serves; N+1's `owedctl migrate up` runs under it; N+1 starts beside N;
// N stops. Then the rollback, the same shape backwards: N starts beside
// N+1 on N+1's schema, N+1 stops, and N+1's `owedctl migrate down-to` N's
// schema runs while N serves. After each half every row scheduled
// is delivered exactly once (the sandbox accepted each key once), and
// nothing is left leased, queued or sending, or in the queue.
func TestUpgradeAndRollback(t *testing.T) {
	t.Parallel()
	n, next := buildReleases(t)
	e := newEnv(t)
	// The stack's database is at this tree's head; N ran on its own schema.
	if _, err := migrate.DownTo(ctx, e.st.DB.Owner, n.head); err != nil {
		t.Fatal(err)
	}

	// Upgrade.
	nSweeper, nWorker := e.startSweeper(t, n), e.startWorker(t, n)
	e.waitReady(t, nSweeper, fmt.Sprintf("ok: schema %d", n.head))
	e.sched.setAPIs(nSweeper.public)
	e.sched.start()
	e.waitDelivered(t, "N alone", 10)

	e.owedctl(t, next, "migrate", "up")
	if out := e.owedctl(t, next, "migrate", "status"); !strings.Contains(out, fmt.Sprintf("database schema %05d", next.head)) {
		t.Errorf("migrate status after up:\n%s", out)
	}
	// The ledger was partitioned in place under N's deliveries: the rows
	// from before are the legacy partition's, the table as it was.
	e.checkPartitioned(t, true)
	// N stays ready on the newer schema and keeps delivering on it.
	e.waitReady(t, nSweeper, fmt.Sprintf("ok: schema %d, newer than this build's %d and compatible with it", next.head, n.head))
	e.waitReady(t, nWorker, "")
	e.waitDelivered(t, "N on N+1's schema", 10)

	nextSweeper, nextWorker := e.startSweeper(t, next), e.startWorker(t, next)
	e.waitReady(t, nextSweeper, fmt.Sprintf("ok: schema %d", next.head))
	e.waitReady(t, nextWorker, "")
	e.sched.setAPIs(nSweeper.public, nextSweeper.public)
	e.waitDelivered(t, "N and N+1 side by side", 10)
	e.sched.setAPIs(nextSweeper.public)
	e.stop(t, nSweeper, nWorker)
	e.waitDelivered(t, "N+1 alone", 10)
	e.sched.stop(t)
	e.checkSettled(t, "after the upgrade")

	// Rollback, the same shape backwards: N starts beside N+1 on N+1's
	// schema, N+1 stops, and the schema goes back to N's while N serves.
	e.sched.start()
	e.waitDelivered(t, "N+1 before the rollback", 10)
	nSweeper, nWorker = e.startSweeper(t, n), e.startWorker(t, n)
	e.waitReady(t, nSweeper, fmt.Sprintf("ok: schema %d, newer than this build's %d and compatible with it", next.head, n.head))
	e.waitReady(t, nWorker, "")
	e.sched.setAPIs(nSweeper.public, nextSweeper.public)
	e.waitDelivered(t, "N beside N+1 on N+1's schema", 10)
	e.sched.setAPIs(nSweeper.public)
	e.stop(t, nextSweeper, nextWorker)
	e.waitDelivered(t, "N alone on N+1's schema", 10)
	e.owedctl(t, next, "migrate", "down-to", strconv.FormatInt(n.head, 10))
	e.checkPartitioned(t, false)
	e.waitReady(t, nSweeper, fmt.Sprintf("ok: schema %d", n.head))
	e.waitReady(t, nWorker, "")
	e.waitDelivered(t, "N alone after the rollback", 10)
	e.sched.stop(t)
	e.checkSettled(t, "after the rollback")
	e.stop(t, nSweeper, nWorker)
}

// checkPartitioned checks whether the ledger is partitioned by month
// (docs/upgrade.md): when it is, the rows N scheduled before the upgrade
// are in the legacy partition and the rows since in this month's; when it
// is not, every row is in the one table.
func (e *env) checkPartitioned(t *testing.T, want bool) {
	t.Helper()
	var kind string
	var legacy, total int64
	if err := e.st.DB.Owner.QueryRow(`SELECT relkind::text FROM pg_class WHERE oid = 'owed_notifications'::regclass`).
		Scan(&kind); err != nil {
		t.Fatal(err)
	}
	if err := e.st.DB.Owner.QueryRow(`SELECT count(*) FROM owed_notifications`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if !want {
		if kind != "r" || total == 0 {
			t.Errorf("after the rollback the ledger is of kind %q with %d rows, want one table holding them all", kind, total)
		}
		return
	}
	if err := e.st.DB.Owner.QueryRow(`SELECT count(*) FROM owed_notifications_legacy`).Scan(&legacy); err != nil {
		t.Fatal(err)
	}
	if kind != "p" || legacy == 0 || legacy > total {
		t.Errorf("after the upgrade the ledger is of kind %q, %d of its %d rows legacy; want partitioned, the rows "+
			"from before in the legacy partition", kind, legacy, total)
	}
}

// env is the test's system: one database, the queue emulator and the
// sandbox in process (stacktest), the releases' sweepers and workers as
// child processes.
type env struct {
	st     *stacktest.Stack
	queue  *rest.Client
	logDir string
	sched  *scheduler
	mu     sync.Mutex
	procs  []*proc
}

// proc is a started sweeper or worker.
type proc struct {
	p      *launch.Process
	public string // the main listener's base URL
	readyz string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{st: stacktest.New(t, stacktest.Options{}), logDir: t.TempDir()}
	e.queue = e.st.Queue
	e.sched = &scheduler{}
	t.Cleanup(func() {
		e.sched.stop(nil)
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, p := range e.procs {
			p.p.Stop(time.Minute, nil)
		}
	})
	return e
}

func (e *env) queueVars() map[string]string {
	return map[string]string{"OWED_QUEUE_BACKEND": "rest", "OWED_QUEUE_URL": e.st.QueueURL,
		"OWED_QUEUE_TOKEN": stacktest.QueueToken, "OWED_QUEUE_NAME": e.queue.Name(),
		"OWED_DATABASE_URL": e.st.DB.AppURL, "OWED_PROVIDER_RATE": providerRate, "OWED_LOG_LEVEL": "info"}
}

func (e *env) start(t *testing.T, name, path string, port int, readyz string, vars map[string]string) *proc {
	t.Helper()
	e.mu.Lock()
	log := filepath.Join(e.logDir, fmt.Sprintf("%02d-%s.log", len(e.procs), strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(name)))
	e.mu.Unlock()
	p, err := launch.Start(ctx, launch.Spec{Name: name, Path: path, Env: launch.Environ(e.queueVars(), vars), Log: log,
		Ready: launch.Healthz(base(port)), ReadyTimeout: settle})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	pr := &proc{p: p, public: base(port), readyz: readyz}
	e.mu.Lock()
	e.procs = append(e.procs, pr)
	e.mu.Unlock()
	return pr
}

func (e *env) startSweeper(t *testing.T, r release) *proc {
	t.Helper()
	port, metrics := freePort(t), freePort(t)
	return e.start(t, "sweeper "+r.name, r.path("sweeper"), port, base(metrics)+"/readyz", map[string]string{
		"OWED_LISTEN_ADDR": addr(port), "OWED_METRICS_ADDR": addr(metrics),
		"OWED_CRON_SECRET": cronSecret, "OWED_API_TOKEN": apiToken})
}

func (e *env) startWorker(t *testing.T, r release) *proc {
	t.Helper()
	port := freePort(t)
	return e.start(t, "worker "+r.name, r.path("worker"), port, base(port)+"/readyz", map[string]string{
		"OWED_LISTEN_ADDR": addr(port), "OWED_PROVIDER": "sandbox", "OWED_SANDBOX_URL": e.st.SandboxURL,
		"OWED_SHUTDOWN_TIMEOUT": "20s"})
}

// stop sends SIGTERM and waits for a clean exit.
func (e *env) stop(t *testing.T, ps ...*proc) {
	t.Helper()
	for _, p := range ps {
		if err := p.p.Stop(2*time.Minute, nil); err != nil {
			t.Errorf("stop: %v\n%s", err, launch.Tail(p.p.Log(), 20))
		}
	}
}

// waitReady polls p's /readyz until it answers 200 and, for a sweeper, its
// schema check says want.
func (e *env) waitReady(t *testing.T, p *proc, want string) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(p.readyz)
		if err != nil {
			last = err.Error()
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(body))
		var checks map[string]string
		json.Unmarshal(body, &checks)
		if resp.StatusCode == http.StatusOK && (want == "" || checks["schema"] == want) {
			return
		}
	}
	t.Fatalf("%s /readyz: last %s, want 200 with schema %q\n%s", p.p.Name(), last, want, launch.Tail(p.p.Log(), 20))
}

// owedctl runs a release's owedctl as the schema's owner.
func (e *env) owedctl(t *testing.T, r release, args ...string) string {
	t.Helper()
	cmd := exec.Command(r.path("owedctl"), args...)
	cmd.Env = launch.Environ(map[string]string{"OWED_DATABASE_URL": e.st.DB.OwnerURL})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s owedctl %s: %v\n%s", r.name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// counts reads the ledger: delivered rows and all rows.
func (e *env) counts(t *testing.T) (delivered, total int, states string) {
	t.Helper()
	rows, err := e.st.DB.Owner.Query(`SELECT state, count(*) FROM owed_notifications GROUP BY state ORDER BY state`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var s string
		var c int
		if err := rows.Scan(&s, &c); err != nil {
			t.Fatal(err)
		}
		total += c
		if s == "delivered" {
			delivered = c
		}
		parts = append(parts, fmt.Sprintf("%s=%d", s, c))
	}
	return delivered, total, strings.Join(parts, " ")
}

// waitDelivered waits until more more rows than now are delivered: the
// system, as it runs at this step, delivers what is scheduled.
func (e *env) waitDelivered(t *testing.T, step string, more int) {
	t.Helper()
	start, _, _ := e.counts(t)
	var states string
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := e.sched.failed(); err != nil {
			t.Fatalf("%s: scheduling: %v", step, err)
		}
		var d int
		if d, _, states = e.counts(t); d >= start+more {
			return
		}
	}
	t.Fatalf("%s: fewer than %d rows delivered after %d: %s\n%s", step, more, start, states, e.logs())
}

// checkSettled waits until every scheduled row is delivered, then checks
// that the sandbox accepted each row's key once and the queue is empty.
func (e *env) checkSettled(t *testing.T, step string) {
	t.Helper()
	want := e.sched.count()
	var states string
	// The hosted cron keeps calling while the rows settle: it is the
	// safety net for a row whose lease a stopped sweeper left behind
	// (N's sweeper, stopped mid-lease, dropped an answer its statement
	// had committed: five rows waited out their lease with nothing left
	// to sweep them).
	lastCron := time.Now()
	for deadline := time.Now().Add(settle); ; time.Sleep(100 * time.Millisecond) {
		if time.Since(lastCron) > cronWhileSettling {
			e.sched.cron()
			lastCron = time.Now()
		}
		d, total, s := e.counts(t)
		states = s
		if d == want && total == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d rows scheduled through the API, ledger has %s: rows lost, duplicated or stuck\n%s",
				step, want, states, e.logs())
		}
	}
	st, err := e.st.SandboxClient.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Accepted != int64(want) || st.DistinctKeys != int64(want) || st.Duplicates != 0 {
		t.Errorf("%s: sandbox accepted %d sends of %d keys (%d duplicates), want each of the %d rows once",
			step, st.Accepted, st.DistinctKeys, st.Duplicates, want)
	}
	for deadline := time.Now().Add(settle); ; time.Sleep(100 * time.Millisecond) {
		qs, err := e.queue.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if qs.Visible == 0 && qs.InFlight == 0 && qs.Delayed == 0 && qs.DeadLetterDepth == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: every row delivered, but the queue still holds %+v", step, qs)
		}
	}
	t.Logf("%s: %d rows delivered once each (%s)", step, want, states)
}

// logs is the tail of every child's log, for a failure.
func (e *env) logs() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, p := range e.procs {
		fmt.Fprintf(&b, "--- %s:\n%s\n", p.p.Name(), launch.Tail(p.p.Log(), 12))
	}
	return b.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
func base(port int) string { return "http://" + addr(port) }
