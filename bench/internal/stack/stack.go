// Package stack runs owed as it is deployed, for the benchmarks that need
// real processes: one bin/sweeper and N bin/worker processes configured only
// through OWED_* variables and started through internal/launch (so they die
// with the benchmark), against a queue of the backend asked for (queues.go:
// the emulator or an embedded JetStream server in this process, or the
// local SQS server as a child) and an in-process sandbox provider on
// loopback. The benchmark plays the hosted cron: it calls POST /cron/sweep
// itself, on whatever schedule it measures.
//
// The emulator keeps its tables in a database of its own, so the ledger
// database's statistics (pg_stat_database, pg_stat_statements) count owed's
// statements only, not the queue's, which in production is a hosted service.
package stack

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/internal/launch"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/sweep"
)

const (
	queueToken = "bench-queue-token-0123456789"
	cronSecret = "bench-cron-secret-0123456789"
	// startTimeout bounds how long a process may take to answer /healthz.
	startTimeout = 30 * time.Second
	// stopTimeout is how long a process has to exit after SIGTERM before it
	// is killed; workers finish in-flight sends first.
	stopTimeout = 20 * time.Second
)

// Config describes the stack to start.
type Config struct {
	// DB is the ledger database; the processes connect as its app role.
	DB *benchutil.DB
	// Bin is the folder holding the sweeper and worker binaries.
	Bin string
	// Queue is the backend (backends.Names); empty is backends.Default.
	Queue       string
	Workers     int
	Concurrency int
	// ProviderRate is the workers' OWED_PROVIDER_RATE; empty is unlimited.
	ProviderRate string
	// SandboxRate and SandboxBurst are the provider's own limit.
	SandboxRate  string
	SandboxBurst int
	// MaxSends is how many sends the sandbox remembers for duplicate
	// counting; set it above the rows a run delivers.
	MaxSends   int
	SweepBatch int
	// SweepRequeueBatch is OWED_SWEEP_REQUEUE_BATCH; zero keeps its default.
	SweepRequeueBatch int
	PublishAhead      time.Duration
	// SweepOnNotify is the sweeper's OWED_SWEEP_ON_NOTIFY. It is off unless
	// set, so the benchmarks that play the cron measure the cron's sweeps.
	SweepOnNotify bool
	// Env is given to the sweeper and every worker over the settings above:
	// a provider routing of the benchmark's own (OWED_PROVIDER_*,
	// OWED_PROVIDER_RATES, a webhook provider's URL and secret).
	Env map[string]string
}

// Stack is a running system.
type Stack struct {
	Sandbox *sandbox.Server
	// Queue is the queue server the processes use.
	Queue    *QueueServer
	ssrv     *httptest.Server
	procs    []*launch.Process
	sweepURL string
	// metricsURL is the sweeper's operator listener: /metrics, /readyz.
	metricsURL string
	// workerURLs are the workers' base URLs, for their /metrics.
	workerURLs []string
	http       *http.Client
}

// Start starts the queue, the sandbox, the sweeper and the workers, and
// returns once every process answers /healthz and the sweeper its /readyz.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	s := &Stack{http: &http.Client{Timeout: 5 * time.Minute}}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	var err error
	if s.Queue, err = StartQueue(ctx, cmp.Or(cfg.Queue, backends.Default)); err != nil {
		return nil, err
	}

	if s.Sandbox, s.ssrv, err = StartSandbox(cfg.SandboxRate, cfg.SandboxBurst, cfg.MaxSends); err != nil {
		return nil, err
	}

	for _, name := range []string{"sweeper", "worker"} {
		if _, err := os.Stat(filepath.Join(cfg.Bin, name)); err != nil {
			return nil, fmt.Errorf("%w: run `make build` first, or pass the folder holding sweeper and worker", err)
		}
	}
	common := maps.Clone(s.Queue.Env)
	common["OWED_DATABASE_URL"], common["OWED_LOG_LEVEL"] = cfg.DB.AppURL, "info"
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s.sweepURL, s.metricsURL = "http://"+addr+"/cron/sweep", "http://"+metricsAddr
	sweeperVars := map[string]string{}
	if cfg.SweepRequeueBatch > 0 {
		sweeperVars["OWED_SWEEP_REQUEUE_BATCH"] = strconv.Itoa(cfg.SweepRequeueBatch)
	}
	if err := s.spawn(ctx, filepath.Join(cfg.Bin, "sweeper"), "sweeper", addr, common, sweeperVars, map[string]string{
		"OWED_CRON_SECRET":  cronSecret,
		"OWED_METRICS_ADDR": metricsAddr,
		"OWED_SWEEP_BATCH":  strconv.Itoa(cfg.SweepBatch), "OWED_PROVIDER_RATE": cfg.ProviderRate,
		"OWED_PUBLISH_AHEAD": cfg.PublishAhead.String(), "OWED_SWEEP_ON_NOTIFY": strconv.FormatBool(cfg.SweepOnNotify)},
		cfg.Env); err != nil {
		return nil, err
	}
	if err := s.ready(ctx, s.metricsURL+"/readyz"); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.Workers; i++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		if err := s.spawn(ctx, filepath.Join(cfg.Bin, "worker"), fmt.Sprintf("worker-%d", i+1), addr, common, map[string]string{
			"OWED_PROVIDER": "sandbox", "OWED_SANDBOX_URL": s.ssrv.URL,
			"OWED_PROVIDER_RATE":      cfg.ProviderRate,
			"OWED_WORKER_CONCURRENCY": strconv.Itoa(cfg.Concurrency),
			// A connection per send in flight, and a few for the pace and
			// the acker, so the pool is never what the run measures.
			"OWED_DB_MAX_CONNS": strconv.Itoa(cfg.Concurrency + 4)}, cfg.Env); err != nil {
			return nil, err
		}
		s.workerURLs = append(s.workerURLs, "http://"+addr)
	}
	ok = true
	return s, nil
}

// UnthrottledRate and UnthrottledBurst are the sandbox's limit when the
// provider must never be what a run measures (the end-to-end runs, owed's
// and River's).
const (
	UnthrottledRate  = "1000000/s"
	UnthrottledBurst = 1000000
)

// StartSandbox serves the sandbox provider in this process on loopback, at
// rate with burst, remembering maxSends sends for duplicate counting: the
// provider the workers send to, owed's or a peer's (bench/river). Close the
// server when done.
func StartSandbox(rate string, burst, maxSends int) (*sandbox.Server, *httptest.Server, error) {
	r, err := pace.ParseRate(rate)
	if err != nil {
		return nil, nil, err
	}
	sb, err := sandbox.New(sandbox.Config{Rate: r, Burst: burst, MaxSends: maxSends})
	if err != nil {
		return nil, nil, err
	}
	return sb, httptest.NewServer(sb), nil
}

// spawn starts one process through the supervisor with only the OWED_*
// variables given (the caller's own OWED_* settings would otherwise leak
// in), logging to a temporary file, and waits for its /healthz.
func (s *Stack) spawn(ctx context.Context, path, name, addr string, vars ...map[string]string) error {
	logf, err := os.CreateTemp("", "owed-bench-"+name+"-*.log")
	if err != nil {
		return err
	}
	logf.Close()
	p, err := launch.Start(ctx, launch.Spec{Name: name, Path: path,
		Env: launch.Environ(append(vars, map[string]string{"OWED_LISTEN_ADDR": addr})...),
		Log: logf.Name(), Ready: launch.Healthz("http://" + addr), ReadyTimeout: startTimeout})
	if err != nil {
		return err
	}
	s.procs = append(s.procs, p)
	return nil
}

// ready checks the sweeper's /readyz once: a binary built from an older tree
// than the benchmark reports the schema as not at head, which would make
// every figure meaningless.
func (s *Stack) ready(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("sweeper not ready (%s): rebuild bin/ from this tree (make build)", strings.TrimSpace(string(body)))
	}
	return nil
}

// Sweep calls POST /cron/sweep as the hosted cron does. An incomplete run
// (503) still returns its counts.
func (s *Stack) Sweep(ctx context.Context) (sweep.Result, error) {
	var res sweep.Result
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.sweepURL, nil)
	if err != nil {
		return res, err
	}
	req.Header.Set("Authorization", "Bearer "+cronSecret)
	resp, err := s.http.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return res, fmt.Errorf("POST /cron/sweep: %s", resp.Status)
	}
	return res, json.NewDecoder(resp.Body).Decode(&res)
}

// SweeperURL is the sweeper's base URL: its scheduling API.
func (s *Stack) SweeperURL() string { return strings.TrimSuffix(s.sweepURL, "/cron/sweep") }

// SweeperMetricsURL is the sweeper's /metrics, on its operator listener.
func (s *Stack) SweeperMetricsURL() string { return s.metricsURL + "/metrics" }

// PeakRSS returns each process's resident-set high-water mark (VmHWM) in
// MiB, keyed by process name ("sweeper", "worker-1", …). Read it before Stop.
func (s *Stack) PeakRSS() (map[string]float64, error) {
	out := map[string]float64{}
	for _, p := range s.procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name(), err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			// "VmHWM:     23456 kB"
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "VmHWM:" {
				kb, err := strconv.ParseFloat(f[1], 64)
				if err != nil {
					return nil, err
				}
				out[p.Name()] = kb / 1024
			}
		}
	}
	return out, nil
}

// Stop terminates the processes, all at once (SIGTERM, then SIGKILL after
// stopTimeout), then the queue server and the sandbox. It is safe to call
// on a partly started stack, and twice.
func (s *Stack) Stop() {
	if err := launch.StopAll(s.procs, stopTimeout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "bench/stack:", err)
	}
	if s.Queue != nil {
		s.Queue.Stop()
	}
	if s.ssrv != nil {
		s.ssrv.Close()
	}
	s.procs, s.Queue, s.ssrv, s.workerURLs = nil, nil, nil, nil
}

// Receives adds up the workers' receive counters (their /metrics). Read it
// before Stop.
func (s *Stack) Receives(ctx context.Context) (benchutil.Receives, error) {
	var total benchutil.Receives
	for _, base := range s.workerURLs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
		if err != nil {
			return total, err
		}
		resp, err := s.http.Do(req)
		if err != nil {
			return total, err
		}
		r, err := benchutil.ParseReceives(resp.Body)
		resp.Body.Close()
		if err != nil {
			return total, fmt.Errorf("%s/metrics: %w", base, err)
		}
		total = total.Add(r)
	}
	return total, nil
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
