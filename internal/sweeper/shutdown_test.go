package sweeper

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/service"
)

// The shutdown grace outlasts the sweep budget: before issue 19 it was a
// fixed 30 s against a 50 s budget, cutting a long sweep off mid-publish.
func TestShutdownGraceOutlastsTheSweep(t *testing.T) {
	t.Parallel()
	c := Defaults()
	if c.Grace() <= c.SweepBudget {
		t.Errorf("default grace %s, budget %s", c.Grace(), c.SweepBudget)
	}
	c.DatabaseURL, c.CronSecret = "postgres://x@y/z", strings.Repeat("s", 16)
	c.ShutdownGrace = c.SweepBudget
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "OWED_SHUTDOWN_GRACE") {
		t.Errorf("grace equal to the budget: %v, want a refusal naming OWED_SHUTDOWN_GRACE", err)
	}
	c.ShutdownGrace = c.SweepBudget + time.Second
	if c.Grace() != c.ShutdownGrace {
		t.Errorf("set grace %s read as %s", c.ShutdownGrace, c.Grace())
	}
}

// On SIGTERM the sweeper stops taking requests and lets a sweep under way
// finish: its answer is delivered, with every row published.
func TestShutdownLetsARunningSweepFinish(t *testing.T) {
	s, srv := setupServer(t, nil)
	p, err := service.Start("sweeper", service.Basics{LogLevel: "error", DatabaseURL: s.DB.AppURL, DBMaxConns: 2,
		ListenAddr: "127.0.0.1:0", Operations: service.Operations{MetricsAddr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.ShutdownTimeout = srv.cfg.Grace()
	addr := p.Listener.Addr().String()
	served := make(chan error, 1)
	go func() { served <- p.Serve(srv.Handler(), srv.OpsHandler()) }()

	s.Schedule(t, "acme", 5, time.Now().Add(-time.Minute), nil)
	// Every queue request now takes a while, so the sweep is still
	// publishing when the shutdown starts.
	if err := s.Emulator.SetFaults(emulator.Faults{LatencyMS: 1500}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		status int
		body   string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/cron/sweep", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answered <- answer{resp.StatusCode, string(b), err}
	}()
	// The sweep has leased its rows (the lease writes them queued) and is
	// publishing them: the queue's latency holds the answer back.
	for deadline := time.Now().Add(30 * time.Second); ; {
		bl, err := s.Ledger.Backlog(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if bl.ByState[ledger.StateQueued] == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sweep never leased its rows: %+v", bl.ByState)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Shutdown()
	// No new request is taken once the shutdown started.
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts connections after the shutdown started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a := <-answered
	var res struct{ Published int }
	if a.err != nil || a.status != 200 || json.Unmarshal([]byte(a.body), &res) != nil || res.Published != 5 {
		t.Fatalf("the sweep under way at shutdown answered %d %q (%v), want 200 with 5 published", a.status, a.body, a.err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve after the shutdown: %v", err)
	}
}
