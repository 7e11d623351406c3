package sweeper

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/service"
)

// A sweeper whose login's session has synchronous_commit = off (set for
// its role in its database, or for the whole database, not in
// postgresql.conf, so only the session shows it) refuses to start, naming
// synchronous_commit and the variable that overrides it; with
// OWED_ALLOW_ASYNC_COMMIT=true it starts, and /readyz answers 200 with the
// problem as its warning.
func TestAsyncCommitIsRefusedOrFlaggedOnReadyz(t *testing.T) {
	s, srv := setupServer(t, nil)
	start := func(allow bool) (*service.Process, error) {
		return service.Start("sweeper", service.Basics{LogLevel: "error", DatabaseURL: s.DB.AppURL, DBMaxConns: 2,
			ListenAddr: "127.0.0.1:0", Operations: service.Operations{MetricsAddr: "127.0.0.1:0", AllowAsyncCommit: allow}})
	}
	// readyz serves srv on p and returns its /readyz answer.
	readyz := func(p *service.Process) (int, map[string]string) {
		t.Helper()
		served := make(chan error, 1)
		go func() { served <- p.Serve(srv.Handler(), srv.OpsHandler()) }()
		defer func() { p.Shutdown(); <-served }()
		resp, err := http.Get("http://" + p.Metrics.Addr().String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var fields map[string]string
		if err := json.Unmarshal(body, &fields); err != nil {
			t.Fatalf("/readyz answered %q: %v", body, err)
		}
		return resp.StatusCode, fields
	}

	// The test database asks for durable commits: no warning.
	p, err := start(false)
	if err != nil {
		t.Fatalf("start on a database with synchronous_commit = on: %v", err)
	}
	if status, fields := readyz(p); status != http.StatusOK || fields["warning"] != "" {
		t.Errorf("/readyz on durable commits = %d %v, want 200 without a warning", status, fields)
	}
	p.Close()

	db := pq.QuoteIdentifier(s.DB.Name)
	for _, scope := range []string{
		"ROLE " + pq.QuoteIdentifier(appUser(t, s.DB.AppURL)) + " IN DATABASE " + db,
		"DATABASE " + db,
	} {
		if _, err := s.DB.Owner.Exec("ALTER " + scope + " SET synchronous_commit = off"); err != nil {
			t.Fatal(err)
		}
		_, err := start(false)
		var refused *service.AsyncCommitError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), "synchronous_commit is off") ||
			!strings.Contains(err.Error(), "set synchronous_commit = on") || !strings.Contains(err.Error(), service.AsyncCommitVariable) {
			t.Fatalf("synchronous_commit off for the %s: start = %v, want a refusal naming synchronous_commit, what to set, and %s",
				scope, err, service.AsyncCommitVariable)
		}
		p, err := start(true)
		if err != nil {
			t.Fatalf("synchronous_commit off for the %s, with %s: %v", scope, service.AsyncCommitVariable, err)
		}
		status, fields := readyz(p)
		p.Close()
		if status != http.StatusOK || fields["database"] != "ok" || !strings.Contains(fields["warning"], "synchronous_commit is off") ||
			!strings.Contains(fields["warning"], service.AsyncCommitVariable) {
			t.Errorf("/readyz with synchronous_commit off for the %s and %s = %d %v, want 200 with a warning naming synchronous_commit and the variable",
				scope, service.AsyncCommitVariable, status, fields)
		}
		// The next scope is tested alone.
		if _, err := s.DB.Owner.Exec("ALTER " + scope + " RESET synchronous_commit"); err != nil {
			t.Fatal(err)
		}
	}
}

// appUser is the login of url.
func appUser(t *testing.T, url string) string {
	t.Helper()
	cfg, err := pq.NewConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.User
}
