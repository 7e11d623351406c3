package devstack

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/launch"
	"github.com/owedhq/owed/internal/migrate"
)

// The roles the migrations and services expect: the owner runs migrations;
// the services connect as the application role, which is no superuser and
// cannot bypass row-level security, so tenant isolation is as real here as
// in production (the services refuse anything else: service.CheckRole);
// the queue emulator connects as a role of its own that owns only its
// owed_queue schema, never the ledger.
const (
	ownerRole = "owed_owner"
	appRole   = "owed_app"
	adminRole = "owed_admin"
	queueRole = "owed_queue"
	// operatorRole is on-call's login: the console's pool and owedctl's
	// operator commands (the migrations make it a member of owed_operator).
	operatorRole = "owed_oncall"
	dbName       = "owed"
	// pgPort only names the socket file: the cluster listens on a unix
	// socket in its own folder and on no TCP port, so it never collides.
	pgPort = 5432
	// maxSocketPath is the longest unix socket path the kernel accepts
	// (sun_path is 108 bytes with its terminating NUL).
	maxSocketPath = 107
	// pgTimeout bounds PostgreSQL's start, its stop and a pg_ctl call.
	pgTimeout = 60 * time.Second
)

// FindPostgres returns the folder holding initdb, postgres and pg_ctl: from
// PATH, else the newest /usr/lib/postgresql/*/bin.
func FindPostgres() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		// A symlink on PATH (Debian's /usr/local/bin) leads to the folder
		// that also holds pg_ctl.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(matches, func(i, j int) bool { return pgVersion(matches[i]) < pgVersion(matches[j]) })
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("initdb not found on PATH or in /usr/lib/postgresql/*/bin: install PostgreSQL (apt-get install postgresql) or set OWED_DATABASE_URL to use a running server")
}

// pgVersion is the major version in /usr/lib/postgresql/<v>/bin/initdb.
func pgVersion(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// cluster is the throwaway PostgreSQL in Dir/pg, the Go form of
// scripts/with-postgres.sh. The server is a supervised child (postgres
// itself, not pg_ctl, which would leave it parentless), so it dies with
// owedctl like every other child.
type cluster struct {
	bin  string
	dir  string // Dir/pg, owned by the postgres OS user when we are root
	data string
	log  string
	// sock is the socket folder: dir itself, or a folder under /tmp when
	// dir's path is too long for a socket.
	sock    string
	tmpSock bool
	// postgres, when set, runs the programs as the postgres OS user: they
	// refuse to run as root.
	postgres *user.User
	cred     *syscall.Credential
	// server is the running postmaster.
	server *launch.Process
}

func newCluster(dir, logDir string) (*cluster, error) {
	bin, err := FindPostgres()
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin, dir: filepath.Join(dir, "pg"), log: filepath.Join(logDir, "postgres.log")}
	c.data = filepath.Join(c.dir, "data")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, errors.New("running as root, PostgreSQL needs the postgres OS user, which does not exist: create it (useradd --system postgres) or run as another user")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.postgres, c.cred = u, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return c, nil
}

// env and workDir are the programs' environment and working folder: the
// postgres user's own when we are root (the current folder may be closed
// to it), ours otherwise.
func (c *cluster) env() []string {
	if c.postgres == nil {
		return launch.Environ()
	}
	return launch.Environ(map[string]string{"HOME": c.postgres.HomeDir, "USER": "postgres", "LOGNAME": "postgres"})
}

func (c *cluster) workDir() string {
	if c.postgres == nil {
		return ""
	}
	return "/"
}

// run runs a short-lived program (initdb, pg_ctl, test) to completion, as
// the postgres user when we are root, through launch.Output.
func (c *cluster) run(ctx context.Context, path string, args ...string) error {
	if !filepath.IsAbs(path) {
		path = filepath.Join(c.bin, path)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env, cmd.Dir = c.env(), c.workDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	out, err := launch.Output(cmd)
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", filepath.Base(path), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// chown gives path to the postgres user when the cluster runs as it.
func (c *cluster) chown(path string) error {
	if c.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		return fmt.Errorf("give %s to the postgres user: %w", path, err)
	}
	return nil
}

// start creates the cluster on first use, starts the server, and creates
// the roles and the database when missing.
func (c *cluster) start(ctx context.Context) error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", c.dir, err)
	}
	if err := c.chown(c.dir); err != nil {
		return err
	}
	if c.postgres != nil {
		// The postgres user must reach the folder through every parent; a
		// repository under /root, say, is closed to it.
		test, err := exec.LookPath("test")
		if err == nil {
			err = c.run(ctx, test, "-w", c.dir)
		}
		if err != nil {
			return fmt.Errorf("the postgres OS user cannot write %s (a parent folder is closed to it: %v); pass --dir under /tmp, or set OWED_DATABASE_URL",
				c.dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(c.data, "PG_VERSION")); err != nil {
		if err := c.initdb(ctx); err != nil {
			return err
		}
	} else {
		c.stopLeftover(ctx)
	}
	c.sock = c.dir
	if len(filepath.Join(c.sock, ".s.PGSQL."+strconv.Itoa(pgPort))) > maxSocketPath {
		d, err := os.MkdirTemp("", "owed-dev-pg-")
		if err != nil {
			return fmt.Errorf("create a socket folder: %w", err)
		}
		c.sock, c.tmpSock = d, true
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
		if err := c.chown(d); err != nil {
			return err
		}
	}
	server, err := launch.Start(ctx, launch.Spec{Name: "postgres", Path: filepath.Join(c.bin, "postgres"),
		Args: []string{"-D", c.data, "-k", c.sock, "-p", strconv.Itoa(pgPort)},
		Env:  c.env(), Dir: c.workDir(), Credential: c.cred, Log: c.log,
		Ready: c.ready, ReadyTimeout: pgTimeout,
		// SIGINT is PostgreSQL's fast shutdown (pg_ctl -m fast): sessions
		// are ended, the data is checkpointed.
		StopSignal: syscall.SIGINT})
	if err != nil {
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	c.server = server
	return c.createRoles(ctx)
}

// ready is nil once the server accepts a connection.
func (c *cluster) ready(ctx context.Context) error {
	db, err := sql.Open("postgres", c.superuserURL())
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// initdb creates the cluster: trust authentication is safe because it
// listens on a unix socket in its own folder only.
func (c *cluster) initdb(ctx context.Context) error {
	if err := c.run(ctx, "initdb", "-D", c.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale"); err != nil {
		return err
	}
	conf := "\n# owedctl dev: a unix socket only (the socket folder and port are given at start).\n" +
		"listen_addresses = ''\nmax_connections = 200\n" +
		"# A dev ledger may lose its last commits in a crash, never its consistency.\nsynchronous_commit = off\n"
	f, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("configure the cluster: %w", err)
	}
	defer f.Close()
	_, err = f.WriteString(conf)
	return err
}

// stopLeftover stops a server an earlier run left running (an owedctl from
// before the server died with it, or one started by hand), so this run
// starts its own.
func (c *cluster) stopLeftover(ctx context.Context) {
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err != nil {
		return
	}
	if c.run(ctx, "pg_ctl", "-D", c.data, "status") == nil {
		c.run(ctx, "pg_ctl", "-D", c.data, "-m", "fast", "-w", "stop")
	}
}

func (c *cluster) url(role string) string {
	return fmt.Sprintf("postgres://%s@/%s?host=%s&port=%d&sslmode=disable", role, dbName, c.sock, pgPort)
}

func (c *cluster) superuserURL() string {
	return fmt.Sprintf("postgres://postgres@/postgres?host=%s&port=%d&sslmode=disable", c.sock, pgPort)
}

// createRoles creates the three roles before migrating (the migrations
// grant the application role its rights only when it exists), the database,
// and the emulator's schema owned by its role.
func (c *cluster) createRoles(ctx context.Context) error {
	su, err := sql.Open("postgres", c.superuserURL())
	if err != nil {
		return err
	}
	defer su.Close()
	if _, err := su.ExecContext(ctx, qCreateRoles); err != nil {
		return fmt.Errorf("create the roles: %w", err)
	}
	var exists bool
	if err := su.QueryRowContext(ctx, qDatabaseExists, dbName).Scan(&exists); err != nil {
		return fmt.Errorf("look for the database: %w", err)
	}
	if !exists {
		if _, err := su.ExecContext(ctx, "CREATE DATABASE "+dbName+" OWNER "+ownerRole); err != nil {
			return fmt.Errorf("create the database: %w", err)
		}
	}
	// Only the owner creates temporary objects (docs/security.md); a
	// cluster an earlier owedctl made gets the same.
	if _, err := su.ExecContext(ctx, "REVOKE TEMPORARY ON DATABASE "+dbName+" FROM PUBLIC"); err != nil {
		return fmt.Errorf("revoke TEMPORARY from PUBLIC: %w", err)
	}
	db, err := sql.Open("postgres", c.url("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, qQueueSchema); err != nil {
		return fmt.Errorf("give the queue emulator its schema: %w", err)
	}
	return nil
}

const (
	qCreateRoles = `
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '` + ownerRole + `') THEN
        CREATE ROLE ` + ownerRole + ` LOGIN CREATEDB CREATEROLE NOSUPERUSER NOBYPASSRLS;
    END IF;
    -- The migrations create owed's group roles (migrations/00018); a
    -- cluster an earlier owedctl made has an owner without CREATEROLE.
    ALTER ROLE ` + ownerRole + ` CREATEROLE;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '` + adminRole + `') THEN
        CREATE ROLE ` + adminRole + ` LOGIN NOSUPERUSER NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '` + appRole + `') THEN
        CREATE ROLE ` + appRole + ` LOGIN NOSUPERUSER NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '` + queueRole + `') THEN
        CREATE ROLE ` + queueRole + ` LOGIN NOSUPERUSER NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '` + operatorRole + `') THEN
        CREATE ROLE ` + operatorRole + ` LOGIN NOSUPERUSER NOBYPASSRLS;
    END IF;
END
$$`
	// qQueueSchema gives the emulator's role its schema. A cluster an
	// earlier owedctl made has the schema as the owner's, which ran the
	// emulator then: its tables (and their sequences) change hands too.
	qQueueSchema = `
CREATE SCHEMA IF NOT EXISTS owed_queue AUTHORIZATION ` + queueRole + `;
ALTER SCHEMA owed_queue OWNER TO ` + queueRole + `;
DO $$
DECLARE t record;
BEGIN
    FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = 'owed_queue' LOOP
        EXECUTE format('ALTER TABLE owed_queue.%I OWNER TO ` + queueRole + `', t.tablename);
    END LOOP;
END
$$`
	qDatabaseExists = `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`
)

// restart stops the server in fast mode and starts it again, as `pg_ctl
// restart -m fast` does: open sessions are ended and every client must
// reconnect, as after a failover.
func (c *cluster) restart(ctx context.Context) error {
	if c.server == nil {
		return errors.New("restart PostgreSQL: the cluster is not running")
	}
	if err := c.server.Stop(pgTimeout, nil); err != nil {
		return fmt.Errorf("restart PostgreSQL: %w", err)
	}
	server, err := c.server.Restart(ctx)
	if err != nil {
		return fmt.Errorf("restart PostgreSQL: %w", err)
	}
	c.server = server
	return nil
}

// pid is the postmaster's process id, or 0 when it is not running.
func (c *cluster) pid() int {
	if c.server == nil {
		return 0
	}
	return c.server.Pid()
}

// stop stops the server in fast mode (open sessions are ended, the data is
// checkpointed), or at once when force closes, and removes a temporary
// socket folder.
func (c *cluster) stop(force <-chan struct{}) error {
	if c.server == nil {
		return nil
	}
	err := c.server.Stop(pgTimeout, force)
	c.server = nil
	if c.tmpSock {
		os.RemoveAll(c.sock)
	}
	if err != nil {
		return fmt.Errorf("stop PostgreSQL: %w", err)
	}
	return nil
}

// roleURLs are the database URLs of the stack's roles: admin creates the
// tenant token (a member of owed_token_admin); operator is the console's
// (a member of owed_operator).
type roleURLs struct{ owner, app, queue, admin, operator string }

// database starts or reuses the local cluster, or takes cfg.DatabaseURL, and
// returns its roles' URLs. cfg.DatabaseURL is one role for everything (it
// must migrate, so it owns the tables): the children are then started with
// service.InsecureRoleVariable, and each logs that at error level.
func (s *Stack) database(ctx context.Context) (roleURLs, error) {
	if u := s.cfg.DatabaseURL; u != "" {
		return roleURLs{u, u, u, u, u}, nil
	}
	c, err := newCluster(s.cfg.Dir, s.logDir())
	if err != nil {
		return roleURLs{}, err
	}
	s.cluster = c
	if err := c.start(ctx); err != nil {
		return roleURLs{}, err
	}
	s.progress("postgres")
	return roleURLs{c.url(ownerRole), c.url(appRole), c.url(queueRole), c.url(adminRole), c.url(operatorRole)}, nil
}

func (s *Stack) migrate(ctx context.Context, ownerURL string) error {
	db, err := sql.Open("postgres", ownerURL)
	if err != nil {
		return fmt.Errorf("open the database as its owner: %w", err)
	}
	defer db.Close()
	applied, err := migrate.Up(ctx, db)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	s.progress(fmt.Sprintf("migrated(%d applied)", len(applied)))
	if s.cfg.DatabaseURL != "" {
		// One role for everything: it owns the tables, and runs the
		// services' cross-tenant functions only as a member of owed_runtime,
		// and the console's holds and audit lines only as a member of
		// owed_operator.
		if _, err := db.ExecContext(ctx, "GRANT owed_runtime, owed_operator TO CURRENT_USER"); err != nil {
			return fmt.Errorf("make the database role a member of owed_runtime and owed_operator: %w", err)
		}
	}
	return nil
}

// createToken creates the dev tenant's API token as the token
// administrator (owed_admin: the runtime role may not insert tokens).
func createToken(ctx context.Context, adminURL string) (string, error) {
	db, err := sql.Open("postgres", adminURL)
	if err != nil {
		return "", err
	}
	defer db.Close()
	token, _, err := api.NewTokens(db, nil).Create(ctx, Tenant, "owedctl dev")
	return token, err
}
