package worker

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/migrate"
	"github.com/owedhq/owed/internal/stacktest"
)

// The worker's /readyz accepts a newer schema that breaks no binary of its
// own (a rolling upgrade after `migrate up`) and refuses, with advice, one
// whose migrations break it.
func TestReadySchemaRange(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Options{})
	this, err := migrate.This()
	if err != nil {
		t.Fatal(err)
	}
	owner := func(q string, args ...any) {
		t.Helper()
		if err := s.DB.OwnerTx(context.Background(), func(tx *sql.Tx) error { _, err := tx.Exec(q, args...); return err }); err != nil {
			t.Fatal(err)
		}
	}
	newer := this.Head + 3
	owner(`INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, newer)
	owner(`INSERT INTO owed_schema_compat (version, breaks_before) VALUES ($1, 0)`, newer)
	ready := func() *httptest.ResponseRecorder {
		// A handler per probe: its answer is cached.
		w := httptest.NewRecorder()
		Handler(s.DB.App, s.Queue, NewRegistry(), nil).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return w
	}
	if w := ready(); w.Code != http.StatusOK {
		t.Errorf("on an expanded newer schema: %d %s, want 200", w.Code, w.Body)
	}
	owner(`UPDATE owed_schema_compat SET breaks_before = $1 WHERE version = $1`, newer)
	want := fmt.Sprintf("schema %d requires binaries of schema ≥ %d; this build is %d", newer, newer, this.Head)
	if w := ready(); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), want) {
		t.Errorf("on a contracted newer schema: %d %s, want 503 with %q", w.Code, w.Body, want)
	}
}
