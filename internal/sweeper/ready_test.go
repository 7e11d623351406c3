package sweeper

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/migrate"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/stacktest"
)

// The scheduling API needs only Postgres: with the queue unreachable
// /readyz stays 200, while the sweep's answer names the queue's error and
// owed_queue_up is 0. (Before issue 19 /readyz answered 503.)
func TestReadyWithoutTheQueue(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Options{})
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	q, err := rest.New(rest.Config{URL: dead.URL, Token: stacktest.QueueToken, Name: "q-gone"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := newServer(t, s, nil).cfg
	cfg.SweepBudget = 2 * time.Second
	srv, err := New(cfg, s.Ledger, q, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Schedule(t, "acme", 3, time.Now().Add(-time.Minute), nil)
	w := do(srv.Handler(), http.MethodPost, "/cron/sweep", "Bearer "+secret)
	var ans struct {
		Published  int
		Complete   bool
		QueueError string `json:"queue_error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusServiceUnavailable || ans.Complete || ans.Published != 0 ||
		!strings.Contains(ans.QueueError, "the queue refused or did not answer a publish") {
		t.Errorf("sweep with the queue down: %d %s, want 503 with queue_error", w.Code, w.Body)
	}
	r := do(srv.OpsHandler(), http.MethodGet, "/readyz", "")
	if r.Code != http.StatusOK || strings.Contains(r.Body.String(), "queue") ||
		!strings.Contains(r.Body.String(), `"database":"ok"`) {
		t.Errorf("/readyz with the queue down: %d %s, want 200 on the database and schema only", r.Code, r.Body)
	}
	m := do(srv.OpsHandler(), http.MethodGet, "/metrics", "").Body.String()
	if !strings.Contains(m, "\nowed_queue_up 0\n") {
		t.Errorf("/metrics lacks owed_queue_up 0:\n%s", grepLines(m, "owed_queue_"))
	}
	last := regexp.MustCompile(`\nowed_queue_last_publish_error_timestamp_seconds (\S+)\n`).FindStringSubmatch(m)
	if last == nil {
		t.Fatalf("/metrics lacks owed_queue_last_publish_error_timestamp_seconds:\n%s", grepLines(m, "owed_queue_"))
	}
	if ts, _ := strconv.ParseFloat(last[1], 64); ts < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("last publish error at %s, want the sweep's", last[1])
	}
}

// With the queue up the sweep's answer has no queue_error and the gauge is 1.
func TestQueueUpMetric(t *testing.T) {
	s, srv := setupServer(t, nil)
	s.Schedule(t, "acme", 2, time.Now().Add(-time.Minute), nil)
	w := do(srv.Handler(), http.MethodPost, "/cron/sweep", "Bearer "+secret)
	if w.Code != 200 || strings.Contains(w.Body.String(), "queue_error") {
		t.Errorf("sweep: %d %s", w.Code, w.Body)
	}
	m := do(srv.OpsHandler(), http.MethodGet, "/metrics", "").Body.String()
	for _, want := range []string{"\nowed_queue_up 1\n", "\nowed_queue_last_publish_error_timestamp_seconds 0\n"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(m, "owed_queue_"))
		}
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// /readyz accepts any schema in this build's range and says what to do
// outside it. A newer build's migration is simulated as that build's
// owedctl leaves it: a goose row and its owed_schema_compat row.
func TestReadySchemaRange(t *testing.T) {
	clk := clock.NewStub(time.Now())
	s, srv := setupServer(t, clk)
	this, err := migrate.This()
	if err != nil {
		t.Fatal(err)
	}
	ready := func(status int, want string) {
		t.Helper()
		clk.Advance(service.CacheTTLDefault)
		w := do(srv.OpsHandler(), http.MethodGet, "/readyz", "")
		var body map[string]string
		json.Unmarshal(w.Body.Bytes(), &body)
		if w.Code != status || body["schema"] != want {
			t.Errorf("/readyz: %d %s, want %d with schema %q", w.Code, w.Body, status, want)
		}
	}
	owner := func(q string, args ...any) {
		t.Helper()
		if err := s.DB.OwnerTx(context.Background(), func(tx *sql.Tx) error { _, err := tx.Exec(q, args...); return err }); err != nil {
			t.Fatal(err)
		}
	}
	ready(200, fmt.Sprintf("ok: schema %d", this.Head))
	// A newer build applied an expand-only migration: still ready.
	newer := this.Head + 3
	owner(`INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, newer)
	owner(`INSERT INTO owed_schema_compat (version, breaks_before) VALUES ($1, 0)`, newer)
	ready(200, fmt.Sprintf("ok: schema %d, newer than this build's %d and compatible with it", newer, this.Head))
	// … and a contract that breaks binaries before it: unready, with advice.
	owner(`UPDATE owed_schema_compat SET breaks_before = $1 WHERE version = $1`, newer)
	ready(503, fmt.Sprintf("schema %d requires binaries of schema ≥ %d; this build is %d: upgrade the binary or roll "+
		"the schema back with owedctl migrate down-to %d", newer, newer, this.Head, this.Head))
	owner(`DELETE FROM owed_schema_compat WHERE version = $1`, newer)
	owner(`DELETE FROM goose_db_version WHERE version_id = $1`, newer)
	// Older than this build supports.
	if _, err := migrate.DownTo(context.Background(), s.DB.Owner, this.Oldest-1); err != nil {
		t.Fatal(err)
	}
	// (A number may be unused, so the schema is whatever is below it.)
	below, _, err := migrate.AtHead(context.Background(), s.DB.Owner)
	if err != nil || below >= this.Oldest {
		t.Fatalf("after down-to %d: schema %d (%v)", this.Oldest-1, below, err)
	}
	ready(503, fmt.Sprintf("schema %d is older than this release's oldest supported %d: run owedctl migrate up",
		below, this.Oldest))
}
