// Package testdb is owed's one test-database factory: each test (New, for
// any testing.TB) and each benchmark program (Create) gets its own database,
// copied from a template migrated to head, on the server named by
// OWED_TEST_DATABASE_URL (started by scripts/with-postgres.sh, which `make
// test` and `make bench` run). Tests connect as the application role, which
// is not a superuser and has no BYPASSRLS, so row-level security is really
// enforced in every test.
//
// The owner role must have CREATEDB and CREATEROLE: the migrations create
// owed's group roles (internal/migrate/sql/roles.sql), and the template is built after
// the token administrator's and on-call's logins (AdminUser, OperatorUser)
// are created when missing.
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

	"github.com/lib/pq" // the postgres driver

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
	// Admin is the token administrator (a member of owed_token_admin):
	// what owedctl tokens connects as.
	Admin    *sql.DB
	AdminURL string
	// Operator is on-call's login (a member of owed_operator): what the
	// console and owedctl's operator commands connect as.
	Operator    *sql.DB
	OperatorURL string
}

// OwnerTx runs fn in a transaction as the owning role and commits it when
// fn returns nil: the fixtures that cross tenants. The policies exempt the
// owner (each tenant table's *_owner policy, internal/migrate/sql/roles.sql
// says why): an owner is no boundary, and no service runs as it.
func (d *DB) OwnerTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := d.Owner.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// templates caches, per server, the template New copies.
var templates = struct {
	sync.Mutex
	byAdmin map[string]string
}{byAdmin: map[string]string{}}

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

// AdminUser is the token administrator's login (OWED_TEST_ADMIN_USER,
// default owed_admin).
func AdminUser() string {
	if u := os.Getenv("OWED_TEST_ADMIN_USER"); u != "" {
		return u
	}
	return "owed_admin"
}

// OperatorUser is on-call's login (OWED_TEST_OPERATOR_USER, default
// owed_oncall), a member of owed_operator.
func OperatorUser() string {
	if u := os.Getenv("OWED_TEST_OPERATOR_USER"); u != "" {
		return u
	}
	return "owed_oncall"
}

// New creates a fresh database migrated to head on the test server and
// registers its removal.
func New(tb testing.TB) *DB {
	tb.Helper()
	d, drop, err := Create(context.Background(), AdminURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := drop(); err != nil {
			tb.Logf("%v", err)
		}
	})
	return d
}

// NewEmpty creates a fresh database with no migration applied (the
// server's default template, an empty public schema) and registers its
// removal: for a test that builds a schema some other way, such as the
// current definitions of docs/sql.md.
func NewEmpty(tb testing.TB) *DB {
	tb.Helper()
	d, drop, err := create(context.Background(), AdminURL(tb), "")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := drop(); err != nil {
			tb.Logf("%v", err)
		}
	})
	return d
}

// Create creates a fresh database migrated to head on the server at admin
// (an owner role that may CREATE DATABASE) and returns it with drop, which
// closes its pools and drops it. It is New without a test, for the
// benchmark programs; tests call New.
func Create(ctx context.Context, admin string) (d *DB, drop func() error, err error) {
	templates.Lock()
	tmpl, ok := templates.byAdmin[admin]
	if !ok {
		if tmpl, err = ensureTemplate(ctx, admin); err != nil {
			templates.Unlock()
			return nil, nil, fmt.Errorf("testdb: prepare template: %w", err)
		}
		templates.byAdmin[admin] = tmpl
	}
	templates.Unlock()
	return create(ctx, admin, tmpl)
}

// create creates a database copied from tmpl (the server's default when
// empty) and opens its three pools.
func create(ctx context.Context, admin, tmpl string) (d *DB, drop func() error, err error) {
	adm, err := sql.Open("postgres", admin)
	if err != nil {
		return nil, nil, fmt.Errorf("testdb: %w", err)
	}
	defer adm.Close()

	name := "owed_test_" + randomHex(8)
	stmt := "CREATE DATABASE " + name
	if tmpl != "" {
		stmt += " TEMPLATE " + tmpl
	}
	if _, err := adm.ExecContext(ctx, stmt); err != nil {
		return nil, nil, fmt.Errorf("testdb: create database: %w", err)
	}
	// The services refuse a database whose commits a crash can lose
	// (service.CheckDurable), and the test server runs with
	// synchronous_commit off for speed: each test database asks for durable
	// commits, as production's do. A test of the refusal turns it off again.
	if _, err := adm.ExecContext(ctx, fmt.Sprintf("ALTER DATABASE %s SET synchronous_commit = on", name)); err != nil {
		adm.ExecContext(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
		return nil, nil, fmt.Errorf("testdb: ask for durable commits: %w", err)
	}
	// As docs/security.md's setup does: only the owner creates temporary
	// objects. A database's privileges are not copied from its template.
	if _, err := adm.ExecContext(ctx, "REVOKE TEMPORARY ON DATABASE "+name+" FROM PUBLIC"); err != nil {
		adm.ExecContext(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
		return nil, nil, fmt.Errorf("testdb: revoke TEMPORARY from PUBLIC: %w", err)
	}
	drop = func() error {
		if d.App != nil {
			d.App.Close()
		}
		if d.Owner != nil {
			d.Owner.Close()
		}
		if d.Admin != nil {
			d.Admin.Close()
		}
		if d.Operator != nil {
			d.Operator.Close()
		}
		adm, err := sql.Open("postgres", admin)
		if err != nil {
			return fmt.Errorf("testdb: drop %s: %w", name, err)
		}
		defer adm.Close()
		// WITH (FORCE) ends connections a test left open (a killed process).
		if _, err := adm.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			return fmt.Errorf("testdb: drop %s: %w", name, err)
		}
		return nil
	}
	d = &DB{Name: name}
	if d.OwnerURL, err = withDB(admin, name, ""); err == nil {
		d.AppURL, err = withDB(admin, name, AppUser())
	}
	if err == nil {
		d.AdminURL, err = withDB(admin, name, AdminUser())
	}
	if err == nil {
		d.OperatorURL, err = withDB(admin, name, OperatorUser())
	}
	if err == nil {
		d.Owner, err = sql.Open("postgres", d.OwnerURL)
	}
	if err == nil {
		d.App, err = sql.Open("postgres", d.AppURL)
	}
	if err == nil {
		d.Admin, err = sql.Open("postgres", d.AdminURL)
	}
	if err == nil {
		d.Operator, err = sql.Open("postgres", d.OperatorURL)
	}
	if err != nil {
		drop()
		return nil, nil, fmt.Errorf("testdb: %w", err)
	}
	return d, drop, nil
}

// ensureTemplate creates, once per server and schema version, a database
// migrated to head that New copies. Test binaries run in parallel, so the
// creation is serialised with an advisory lock.
func ensureTemplate(ctx context.Context, admin string) (string, error) {
	name := "owed_tmpl_" + schemaHash()
	adm, err := sql.Open("postgres", admin)
	if err != nil {
		return "", err
	}
	defer adm.Close()
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
	// The migrations grant owed_token_admin and owed_operator to these
	// logins when they exist.
	for _, login := range []string{AdminUser(), OperatorUser()} {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(`DO $$ BEGIN
		    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) THEN CREATE ROLE %s LOGIN; END IF; END $$`,
			pq.QuoteLiteral(login), pq.QuoteIdentifier(login))); err != nil {
			return "", fmt.Errorf("create the login %s (the owner needs CREATEROLE): %w", login, err)
		}
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

func withDB(base, db, user string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("the server URL: %w", err)
	}
	u.Path = "/" + db
	if user != "" {
		u.User = url.User(user)
	}
	return u.String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
