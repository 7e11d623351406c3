package service

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lib/pq"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/testdb"
)

func TestDurabilityProblem(t *testing.T) {
	for _, tc := range []struct {
		d    Durability
		want string // "" when durable, else a phrase of the problem
	}{
		{Durability{SynchronousCommit: "on"}, ""},
		{Durability{SynchronousCommit: "remote_write", StandbyNames: "s1"}, ""},
		{Durability{SynchronousCommit: "remote_apply", StandbyNames: "s1"}, ""},
		{Durability{SynchronousCommit: "on", StandbyNames: "FIRST 1 (s1, s2)", Standbys: 2}, ""},
		// A standby-less local flushes as on does.
		{Durability{SynchronousCommit: "local"}, ""},
		{Durability{SynchronousCommit: "local", StandbyNames: "s1", Standbys: 1}, "does not wait for the synchronous standby"},
		{Durability{SynchronousCommit: "off"}, "synchronous_commit is off"},
		{Durability{SynchronousCommit: "sometimes"}, `synchronous_commit is "sometimes"`},
	} {
		got := tc.d.Problem()
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: Problem() = %q, want %q", tc.d, got, tc.want)
		}
		if got != "" && !strings.Contains(got, "synchronous_commit") {
			t.Errorf("%+v: the problem %q does not name synchronous_commit", tc.d, got)
		}
	}
	if w := (Durability{SynchronousCommit: "on", Standbys: 1}).AsyncStandbys(); !strings.Contains(w, "synchronous_standby_names") {
		t.Errorf("an asynchronous standby: %q, want a warning naming synchronous_standby_names", w)
	}
	if w := (Durability{SynchronousCommit: "on", StandbyNames: "s1", Standbys: 1}).AsyncStandbys(); w != "" {
		t.Errorf("a synchronous standby: %q, want no warning", w)
	}
}

// CheckDurable reads the session's value, which a per-database setting
// makes differ from the server's, and with the override logs the problem
// naming the variable.
func TestCheckDurableReadsTheSession(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	if _, err := db.Owner.Exec("ALTER DATABASE " + pq.QuoteIdentifier(db.Name) + " SET synchronous_commit = local"); err != nil {
		t.Fatal(err)
	}
	d, err := ReadDurability(ctx, db.App)
	if err != nil || d.SynchronousCommit != "local" {
		t.Fatalf("ReadDurability = %+v, %v; want the database's local", d, err)
	}
	if _, err := db.Owner.Exec("ALTER DATABASE " + pq.QuoteIdentifier(db.Name) + " SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	// A fresh pool: the setting applies to sessions that start after it.
	db.App.Close()
	app, err := OpenDB(ctx, db.AppURL, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if _, err := CheckDurable(ctx, app, zerolog.Nop(), false); err == nil || !strings.Contains(err.Error(), AsyncCommitVariable) {
		t.Fatalf("CheckDurable on synchronous_commit = off: %v, want a refusal naming %s", err, AsyncCommitVariable)
	}
	var log bytes.Buffer
	warning, err := CheckDurable(ctx, app, zerolog.New(&log), true)
	if err != nil || !strings.Contains(warning, "synchronous_commit is off") {
		t.Fatalf("CheckDurable with the override = %q, %v; want the problem as a warning", warning, err)
	}
	if l := log.String(); !strings.Contains(l, `"level":"error"`) || !strings.Contains(l, AsyncCommitVariable) || !strings.Contains(l, "synchronous_commit") {
		t.Errorf("the log line %q does not name %s and synchronous_commit at error level", l, AsyncCommitVariable)
	}
}

func TestWithReadyWarningKeepsTheStatusAndOtherRoutes(t *testing.T) {
	inner := http.NewServeMux()
	inner.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"database":"unreachable"}` + "\n"))
	})
	inner.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("m 1\n")) })
	h := WithReadyWarning(inner, "careful")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != `{"database":"unreachable","warning":"careful"}`+"\n" ||
		rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("/readyz = %d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Body.String() != "m 1\n" {
		t.Errorf("/metrics = %q, want it unchanged", rec.Body.String())
	}
}

// Every pool OpenDatabase opens runs without JIT compilation and without
// constraint exclusion (SessionSettings), each unless its URL sets it; a
// key=value connection string the same.
func TestOpenDatabaseTurnsJITOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	sep := map[bool]string{true: "&", false: "?"}[strings.Contains(db.AppURL, "?")]
	for _, c := range []struct{ url, jit, exclusion string }{
		{db.AppURL, "off", "off"},
		{db.AppURL + sep + "jit=on", "on", "off"},
		{db.AppURL + sep + "constraint_exclusion=partition", "off", "partition"},
	} {
		app, err := OpenDatabase(ctx, "OWED_DATABASE_URL", c.url, 1)
		if err != nil {
			t.Fatal(err)
		}
		var jit, exclusion string
		if err := app.QueryRow(`SELECT current_setting('jit'), current_setting('constraint_exclusion')`).Scan(&jit, &exclusion); err != nil ||
			jit != c.jit || exclusion != c.exclusion {
			t.Errorf("jit, constraint_exclusion on a pool of %s: %q, %q (%v), want %q, %q", config.Redact(c.url, c.url),
				jit, exclusion, err, c.jit, c.exclusion)
		}
		app.Close()
	}
	if got := SessionSettings("host=/tmp dbname=owed"); got != "host=/tmp dbname=owed jit=off constraint_exclusion=off" {
		t.Errorf("SessionSettings of a key=value string: %q", got)
	}
	if got := SessionSettings("host=/tmp jit=on"); got != "host=/tmp jit=on constraint_exclusion=off" {
		t.Errorf("SessionSettings of a string setting jit: %q", got)
	}
}
