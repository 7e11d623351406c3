// Package testdb gives each test its own migrated PostgreSQL database on the
// server named by OWED_TEST_DATABASE_URL (started by scripts/with-postgres.sh,
// which `make test` runs). Tests connect as the application role, which is
// not a superuser and has no BYPASSRLS, so row-level security is really
// enforced in every test.
package testdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"sync"
	"testing"

	_ "github.com/lib/pq" // the postgres driver

	"github.com/owedhq/owed/internal/migrate"
	"github.com/owedhq/owed/migrations"
)

// DB is one test's database.
type DB struct {
	Name     string
	App      *sql.DB // as the application role: what services use
	AppURL   string
	Owner    *sql.DB // as the owning role: migrations, fixtures, emulator schema
	OwnerURL string
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// AdminURL returns the owner connection URL of the test server, failing the
// test when the harness is not running.
func AdminURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("OWED_TEST_DATABASE_URL")
	if u == "" {
		t.Fatal("OWED_TEST_DATABASE_URL is not set: run the tests with `make test` " +
			"(it starts a throwaway PostgreSQL) or point it at a server where the owner role may CREATE DATABASE")
	}
	return u
}

// AppUser is the application role's name (OWED_TEST_APP_USER, default owed_app).
func AppUser() string {
	if u := os.Getenv("OWED_TEST_APP_USER"); u != "" {
		return u
	}
	return "owed_app"
}

// New creates a fresh database migrated to head and registers its removal.
func New(t testing.TB) *DB {
	t.Helper()
	admin := AdminURL(t)
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(admin) })
	if templateErr != nil {
		t.Fatalf("testdb: prepare template: %v", templateErr)
	}
	adm, err := sql.Open("postgres", admin)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	defer adm.Close()

	name := "owed_test_" + randomHex(8)
	if _, err := adm.Exec(fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, templateName)); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	d := &DB{Name: name, OwnerURL: withDB(t, admin, name, "")}
	d.AppURL = withDB(t, admin, name, AppUser())
	if d.Owner, err = sql.Open("postgres", d.OwnerURL); err != nil {
		t.Fatalf("testdb: %v", err)
	}
	if d.App, err = sql.Open("postgres", d.AppURL); err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() {
		d.App.Close()
		d.Owner.Close()
		adm, err := sql.Open("postgres", admin)
		if err != nil {
			return
		}
		defer adm.Close()
		// WITH (FORCE) ends connections a test left open (a killed process).
		if _, err := adm.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Logf("testdb: drop %s: %v", name, err)
		}
	})
	return d
}

// ensureTemplate creates, once per server and schema version, a database
// migrated to head that New copies. Test binaries run in parallel, so the
// creation is serialised with an advisory lock.
func ensureTemplate(admin string) (string, error) {
	name := "owed_tmpl_" + schemaHash()
	adm, err := sql.Open("postgres", admin)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	ctx := context.Background()
	conn, err := adm.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(72657)"); err != nil {
		return "", err
	}
	defer conn.ExecContext(ctx, "SELECT pg_advisory_unlock(72657)")

	var exists bool
	if err := conn.QueryRowContext(ctx,
		"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_build"
	conn.ExecContext(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building))
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("CREATE DATABASE %s", building)); err != nil {
		return "", err
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", err
	}
	u.Path = "/" + building
	db, err := sql.Open("postgres", u.String())
	if err != nil {
		return "", err
	}
	_, err = migrate.Up(ctx, db)
	db.Close()
	if err != nil {
		return "", err
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
		return "", err
	}
	return name, nil
}

// schemaHash names the template after the migrations' content so a changed
// migration never reuses a stale template on a long-lived server.
func schemaHash() string {
	h := sha256.New()
	var names []string
	fs.WalkDir(migrations.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	sort.Strings(names)
	for _, n := range names {
		b, _ := migrations.FS.ReadFile(n)
		h.Write([]byte(n))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func withDB(t testing.TB, base, db, user string) string {
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testdb: OWED_TEST_DATABASE_URL: %v", err)
	}
	u.Path = "/" + db
	if user != "" {
		u.User = url.User(user)
	}
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
