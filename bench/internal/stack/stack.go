// Package stack runs owed as it is deployed, for the benchmarks that need
// real processes: one bin/sweeper and N bin/worker processes configured only
// through OWED_* variables, against an in-process queue emulator and sandbox
// provider on loopback. The benchmark plays the hosted cron: it calls
// POST /cron/sweep itself, on whatever schedule it measures.
//
// The emulator keeps its tables in a database of its own, so the ledger
// database's statistics (pg_stat_database, pg_stat_statements) count owed's
// statements only, not the queue's, which in production is a hosted service.
package stack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/sweep"
)

const (
	queueToken = "bench-queue-token-0123456789"
	cronSecret = "bench-cron-secret-0123456789"
	// startTimeout bounds how long a process may take to answer /readyz.
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
	Bin         string
	Workers     int
	Concurrency int
	// ProviderRate is the workers' OWED_PROVIDER_RATE; empty is unlimited.
	ProviderRate string
	// SandboxRate and SandboxBurst are the provider's own limit.
	SandboxRate  string
	SandboxBurst int
	// MaxSends is how many sends the sandbox remembers for duplicate
	// counting; set it above the rows a run delivers.
	MaxSends     int
	SweepBatch   int
	PublishAhead time.Duration
	// Env adds variables to every process.
	Env []string
}

// Stack is a running system.
type Stack struct {
	Sandbox  *sandbox.Server
	queueDB  *benchutil.DB
	emulator *emulator.Emulator
	qsrv     *httptest.Server
	ssrv     *httptest.Server
	procs    []*proc
	sweepURL string
	http     *http.Client
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// Start starts the emulator, the sandbox, the sweeper and the workers, and
// returns once every process answers /readyz.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	s := &Stack{http: &http.Client{Timeout: 5 * time.Minute}}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	var err error
	if s.queueDB, err = benchutil.NewDB(ctx); err != nil {
		return nil, err
	}
	ecfg := emulator.DefaultConfig()
	ecfg.Token, ecfg.DatabaseURL, ecfg.MaxConns = queueToken, s.queueDB.OwnerURL, 32
	if s.emulator, err = emulator.Open(ctx, ecfg, zerolog.Nop()); err != nil {
		return nil, err
	}
	s.emulator.Start(ctx)
	s.qsrv = httptest.NewServer(s.emulator)

	rate, err := pace.ParseRate(cfg.SandboxRate)
	if err != nil {
		return nil, err
	}
	if s.Sandbox, err = sandbox.New(sandbox.Config{Rate: rate, Burst: cfg.SandboxBurst, MaxSends: cfg.MaxSends}); err != nil {
		return nil, err
	}
	s.ssrv = httptest.NewServer(s.Sandbox)

	common := append([]string{
		"OWED_DATABASE_URL=" + cfg.DB.AppURL,
		"OWED_QUEUE_URL=" + s.qsrv.URL, "OWED_QUEUE_TOKEN=" + queueToken, "OWED_QUEUE_NAME=bench",
		"OWED_LOG_LEVEL=info",
	}, cfg.Env...)
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s.sweepURL = "http://" + addr + "/cron/sweep"
	if err := s.spawn(ctx, filepath.Join(cfg.Bin, "sweeper"), "sweeper", addr, append(common,
		"OWED_CRON_SECRET="+cronSecret,
		"OWED_SWEEP_BATCH="+strconv.Itoa(cfg.SweepBatch),
		"OWED_PUBLISH_AHEAD="+cfg.PublishAhead.String())); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.Workers; i++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		if err := s.spawn(ctx, filepath.Join(cfg.Bin, "worker"), fmt.Sprintf("worker-%d", i+1), addr, append(common,
			"OWED_PROVIDER=sandbox", "OWED_SANDBOX_URL="+s.ssrv.URL,
			"OWED_PROVIDER_RATE="+cfg.ProviderRate,
			"OWED_WORKER_CONCURRENCY="+strconv.Itoa(cfg.Concurrency),
			// A connection per send in flight, and a few for the pace and
			// the acker, so the pool is never what the run measures.
			"OWED_DB_MAX_CONNS="+strconv.Itoa(cfg.Concurrency+4))); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

// spawn starts one process with only the OWED_* variables given (the
// caller's own OWED_* settings would otherwise leak in) and waits for its
// /readyz.
func (s *Stack) spawn(ctx context.Context, path, name, addr string, env []string) error {
	logf, err := os.CreateTemp("", "owed-bench-"+name+"-*.log")
	if err != nil {
		return err
	}
	cmd := exec.Command(path)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OWED_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Env = append(cmd.Env, "OWED_LISTEN_ADDR="+addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s (run `make build` first): %w", path, err)
	}
	p := &proc{name: name, cmd: cmd, log: logf.Name(), done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	s.procs = append(s.procs, p)

	deadline := time.Now().Add(startTimeout)
	var last string
	for {
		resp, err := s.http.Get("http://" + addr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = strings.TrimSpace(string(body))
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start; its log: %s", name, p.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			// A binary built from an older tree than the benchmark reports
			// the schema as not at head.
			return fmt.Errorf("%s not ready after %s (%s); its log: %s", name, startTimeout, last, p.log)
		}
	}
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

// PeakRSS returns each process's resident-set high-water mark (VmHWM) in
// MiB, keyed by process name ("sweeper", "worker-1", …). Read it before Stop.
func (s *Stack) PeakRSS() (map[string]float64, error) {
	out := map[string]float64{}
	for _, p := range s.procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			// "VmHWM:     23456 kB"
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "VmHWM:" {
				kb, err := strconv.ParseFloat(f[1], 64)
				if err != nil {
					return nil, err
				}
				out[p.name] = kb / 1024
			}
		}
	}
	return out, nil
}

// Stop terminates the processes (SIGTERM, then SIGKILL after stopTimeout),
// then the emulator and the sandbox, and drops the queue's database. It is
// safe to call on a partly started stack, and twice.
func (s *Stack) Stop() {
	for _, p := range s.procs {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	var errs []error
	for _, p := range s.procs {
		select {
		case <-p.done:
			if !p.cmd.ProcessState.Success() {
				errs = append(errs, fmt.Errorf("%s exited %s; its log: %s", p.name, p.cmd.ProcessState, p.log))
			}
		case <-time.After(stopTimeout):
			p.cmd.Process.Kill()
			<-p.done
			errs = append(errs, fmt.Errorf("%s did not stop within %s; its log: %s", p.name, stopTimeout, p.log))
		}
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "bench/stack:", err)
	}
	if s.qsrv != nil {
		s.emulator.Drain()
		s.qsrv.Close()
		s.emulator.Stop()
	}
	if s.ssrv != nil {
		s.ssrv.Close()
	}
	if s.queueDB != nil {
		s.queueDB.Close()
	}
	s.procs, s.qsrv, s.ssrv, s.queueDB = nil, nil, nil, nil
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
