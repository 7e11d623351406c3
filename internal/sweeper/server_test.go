package sweeper

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/materialise"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/testenv"
)

const secret = "cron-secret-0123456789abcdef"

func setup(t *testing.T) (*stacktest.Stack, http.Handler) {
	t.Helper()
	s, srv := setupServer(t, nil)
	return s, srv.Handler()
}

// setupServer builds the sweeper on its own stack, on clk (nil: the real
// clock).
func setupServer(t *testing.T, clk clock.Clock) (*stacktest.Stack, *Server) {
	t.Helper()
	t.Parallel()
	s := stacktest.New(t, stacktest.Options{})
	return s, newServerOn(t, s, nil, clk)
}

// newServer builds the service on s, with change (when not nil) applied to
// its configuration.
func newServer(t *testing.T, s *stacktest.Stack, change func(*Config)) *Server {
	t.Helper()
	return newServerOn(t, s, change, nil)
}

// newServerOn is newServer on clk (nil: the real clock).
func newServerOn(t *testing.T, s *stacktest.Stack, change func(*Config), clk clock.Clock) *Server {
	t.Helper()
	cfg := Config{CronSecret: secret, SweepBatch: 500, SweepBudget: 30 * time.Second, PublishAhead: time.Minute,
		RequeueAfter: 10 * time.Minute, SweepRequeueBatch: 500, SweepMaxOutstanding: 100000, QueueDepth: 2 * time.Second,
		IdempotencyPrefix: "owed-", DBMaxConns: 4,
		Materialise: materialise.Config{Lookahead: 3 * time.Hour, DefaultLead: 10 * time.Minute},
		Queue: backends.Config{Backend: backends.REST,
			Rest: rest.Config{URL: s.QueueURL, Token: stacktest.QueueToken, Name: s.Queue.Name()}},
		DatabaseURL: s.DB.AppURL}
	if change != nil {
		change(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, s.Ledger, s.Queue, zerolog.Nop(), clk)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func do(h http.Handler, method, path, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestCronAuthAndMethod(t *testing.T) {
	_, h := setup(t)
	for _, path := range []string{"/cron/sweep", "/cron/materialise"} {
		if w := do(h, http.MethodGet, path, "Bearer "+secret); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "POST" {
			t.Errorf("GET %s: %d allow=%q, want 405 with Allow: POST", path, w.Code, w.Header().Get("Allow"))
		}
		if w := do(h, http.MethodPost, path, ""); w.Code != http.StatusUnauthorized {
			t.Errorf("POST %s without the secret: %d, want 401", path, w.Code)
		}
		if w := do(h, http.MethodPost, path, "Bearer "+secret+"x"); w.Code != http.StatusUnauthorized {
			t.Errorf("POST %s with a wrong secret: %d, want 401", path, w.Code)
		}
		if w := do(h, http.MethodPost, path, "Bearer "+secret); w.Code != http.StatusOK {
			t.Errorf("POST %s with the secret: %d %s, want 200", path, w.Code, w.Body)
		}
	}
}

func TestSweepReportsCounts(t *testing.T) {
	s, srv := setupServer(t, nil)
	h, ops := srv.Handler(), srv.OpsHandler()
	s.Schedule(t, "acme", 7, time.Now().Add(-time.Minute), nil)
	w := do(h, http.MethodPost, "/cron/sweep", "Bearer "+secret)
	var res struct {
		Leased, Published, Republished, Slices int
		MaxOutstanding                         int `json:"max_outstanding"`
		Expired                                int64
		DurationMS                             int64   `json:"duration_ms"`
		OldestOwedAgeS                         float64 `json:"oldest_owed_age_s"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || w.Code != 200 {
		t.Fatalf("sweep: %d %s (%v)", w.Code, w.Body, err)
	}
	// The sandbox is unpaced and has sent nothing yet: its cap is one slice.
	if res.Leased != 7 || res.Published != 7 || res.Slices != 1 || res.MaxOutstanding != 500 || res.OldestOwedAgeS < 50 {
		t.Errorf("sweep body: %s", w.Body)
	}
	m := do(ops, http.MethodGet, "/metrics", "")
	for _, want := range []string{`owed_sweep_runs_total{outcome="ok"} 1`, `owed_sweep_rows_total{outcome="published"} 7`, "owed_sweep_slices_total 1",
		`owed_backlog_rows{state="queued"} 7`, "owed_oldest_owed_age_seconds", "owed_queue_dead_letter_depth 0", `owed_build_info{goversion="`,
		`owed_table_dead_tuples{table="owed_notifications"}`, `owed_table_live_tuples{table="owed_notification_attempts"}`} {
		if !strings.Contains(m.Body.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if w := do(ops, http.MethodGet, "/readyz", ""); w.Code != 200 {
		t.Errorf("/readyz: %d %s", w.Code, w.Body)
	}
	for _, h := range []http.Handler{h, ops} {
		if w := do(h, http.MethodGet, "/healthz", ""); w.Code != 200 {
			t.Errorf("/healthz: %d", w.Code)
		}
	}
}

// TestScrapesAreCached: however often /metrics and /readyz are asked, the
// backlog and the queue's stats are read once per service.CacheTTLDefault.
// The clock is stubbed, so "within the TTL" needs no timing.
func TestScrapesAreCached(t *testing.T) {
	clk := clock.NewStub(time.Now())
	s, srv := setupServer(t, clk)
	ops := srv.OpsHandler()
	s.Schedule(t, "acme", 2, time.Now().Add(time.Hour), nil)
	const before = `owed_backlog_rows{state="pending"} 2`
	if m := do(ops, http.MethodGet, "/metrics", "").Body.String(); !strings.Contains(m, before) {
		t.Fatalf("/metrics lacks %q:\n%s", before, m)
	}
	if w := do(ops, http.MethodGet, "/readyz", ""); w.Code != 200 {
		t.Fatalf("/readyz: %d %s", w.Code, w.Body)
	}
	s.Schedule(t, "acme", 3, time.Now().Add(2*time.Hour), nil)
	for range 20 {
		if m := do(ops, http.MethodGet, "/metrics", "").Body.String(); !strings.Contains(m, before) {
			t.Fatalf("a scrape within the TTL read the ledger again: want %q still:\n%s", before, m)
		}
	}
	clk.Advance(service.CacheTTLDefault)
	const after = `owed_backlog_rows{state="pending"} 5`
	if m := do(ops, http.MethodGet, "/metrics", "").Body.String(); !strings.Contains(m, after) {
		t.Errorf("after the TTL /metrics lacks %q:\n%s", after, m)
	}
}

// The sweeper's live /metrics passes promtool's lint (names, units, help).
// promtool comes with Debian's prometheus package, which
// scripts/install-deps.sh installs before `make test` runs the Go tests.
func TestMetricsPassPromtoolCheck(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool", testenv.InstallPromtool)
	s, srv := setupServer(t, nil)
	s.Schedule(t, "acme", 3, time.Now().Add(-time.Minute), nil)
	do(srv.Handler(), http.MethodPost, "/cron/sweep", "Bearer "+secret)
	body := do(srv.OpsHandler(), http.MethodGet, "/metrics", "").Body.String()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// The minute cron samples the console's history once a minute: the first
// call of a minute records the backlog by state and the dead-letter depth,
// later calls of the same minute add nothing, and the next minute's first
// call samples again.
func TestCronSamplesTheHistoryOnceAMinute(t *testing.T) {
	t.Parallel()
	clk := clock.NewStub(time.Now().Truncate(time.Minute).Add(10 * time.Second))
	s := stacktest.New(t, stacktest.Options{})
	// One clock: the sweeper's and its ledger's, which samples the minute.
	s.Ledger = ledger.New(s.DB.App, clk)
	h := newServerOn(t, s, nil, clk).Handler()
	s.Schedule(t, "acme", 3, clk.Now().Add(time.Hour), nil)
	count := func() int {
		t.Helper()
		samples, err := s.Ledger.History(context.Background(), clk.Now().Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return len(samples)
	}
	do(h, http.MethodPost, "/cron/sweep", "Bearer "+secret)
	samples, err := s.Ledger.History(context.Background(), clk.Now().Truncate(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var pending, depth bool
	for _, x := range samples {
		pending = pending || (x.Series == ledger.SeriesBacklog && x.Label == "pending" && x.Value == 3)
		depth = depth || (x.Series == ledger.SeriesDeadLetters && x.Value == 0)
	}
	if !pending || !depth {
		t.Fatalf("the minute's samples %+v lack 3 pending rows or the dead-letter depth", samples)
	}
	first := count()
	do(h, http.MethodPost, "/cron/sweep", "Bearer "+secret)
	if n := count(); n != first {
		t.Errorf("a second cron call in the minute wrote %d samples", n-first)
	}
	clk.Advance(time.Minute)
	do(h, http.MethodPost, "/cron/sweep", "Bearer "+secret)
	if n := count(); n <= first {
		t.Errorf("the next minute's cron call wrote no sample (%d, then %d)", first, n)
	}
}

// The cron keeps the ledger's partitions made, once an hour: its first
// call makes the months missing ahead (here the month after next, which a
// fresh install lacks) as the services' login, later calls in the hour
// leave the ledger alone, and the next hour's first call looks again.
func TestCronKeepsThePartitionsOnceAnHour(t *testing.T) {
	t.Parallel()
	clk := clock.NewStub(time.Now().Truncate(time.Hour).Add(10 * time.Second))
	s := stacktest.New(t, stacktest.Options{})
	s.Ledger = ledger.New(s.DB.App, clk)
	h := newServerOn(t, s, nil, clk).Handler()
	count := func() int {
		t.Helper()
		var n int
		if err := s.DB.Owner.QueryRow(`SELECT count(*) FROM owed_ledger_partitions()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	do(h, http.MethodPost, "/cron/sweep", "Bearer "+secret)
	if n := count(); n != before+3 {
		t.Fatalf("partitions after the hour's first cron call: %d, want %d (the month after next's three)", n, before+3)
	}
	// A partition dropped within the hour is made again only the next hour.
	var last string
	if err := s.DB.Owner.QueryRow(`SELECT partition FROM owed_ledger_partitions()
	    WHERE parent = 'owed_receipts' ORDER BY from_id DESC NULLS LAST LIMIT 1`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.Owner.Exec(`DROP TABLE ` + last); err != nil {
		t.Fatal(err)
	}
	do(h, http.MethodPost, "/cron/sweep", "Bearer "+secret)
	if n := count(); n != before+2 {
		t.Errorf("a second cron call in the hour changed the partitions: %d, want %d", n, before+2)
	}
	clk.Advance(time.Hour)
	do(h, http.MethodPost, "/cron/sweep", "Bearer "+secret)
	if n := count(); n != before+3 {
		t.Errorf("the next hour's cron call left %d partitions, want %d", n, before+3)
	}
}
