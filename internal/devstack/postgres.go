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
)

// The roles the migrations and services expect: the owner runs migrations
// and owns the queue emulator's schema; the services connect as the
// application role, which is no superuser and cannot bypass row-level
// security, so tenant isolation is as real here as in production.
const (
	ownerRole = "owed_owner"
	appRole   = "owed_app"
	dbName    = "owed"
	// pgPort only names the socket file: the cluster listens on a unix
	// socket in its own folder and on no TCP port, so it never collides.
	pgPort = 5432
	// maxSocketPath is the longest unix socket path the kernel accepts
	// (sun_path is 108 bytes with its terminating NUL).
	maxSocketPath = 107
	// pgctlTimeout bounds a pg_ctl start or stop.
	pgctlTimeout = 60 * time.Second
)

// FindPostgres returns the folder holding initdb and pg_ctl: from PATH, else
// the newest /usr/lib/postgresql/*/bin.
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
// scripts/with-postgres.sh.
type cluster struct {
	bin  string
	dir  string // Dir/pg, owned by the postgres OS user when we are root
	data string
	log  string
	// sock is the socket folder: dir itself, or a folder under /tmp when
	// dir's path is too long for a socket.
	sock    string
	tmpSock bool
	// asPostgres runs initdb and pg_ctl as the postgres OS user: they
	// refuse to run as root.
	asPostgres bool
	uid, gid   int
	started    bool
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
		c.asPostgres = true
		c.uid, _ = strconv.Atoi(u.Uid)
		c.gid, _ = strconv.Atoi(u.Gid)
	}
	return c, nil
}

// command runs one of the PostgreSQL programs, as the postgres user when we
// are root, in its own process group so a terminal's Ctrl-C never reaches
// the server it starts: the server is stopped by pg_ctl, in order.
func (c *cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.asPostgres {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

func (c *cluster) run(ctx context.Context, name string, args ...string) error {
	out, err := c.command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// chown gives path to the postgres user when the cluster runs as it.
func (c *cluster) chown(path string) error {
	if !c.asPostgres {
		return nil
	}
	if err := os.Chown(path, c.uid, c.gid); err != nil {
		return fmt.Errorf("give %s to the postgres user: %w", path, err)
	}
	return nil
}

// start creates the cluster on first use, starts it, and creates the roles
// and the database when missing.
func (c *cluster) start(ctx context.Context) error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", c.dir, err)
	}
	if err := c.chown(c.dir); err != nil {
		return err
	}
	if c.asPostgres {
		// The postgres user must reach the folder through every parent; a
		// repository under /root, say, is closed to it.
		if out, err := exec.CommandContext(ctx, "runuser", "-u", "postgres", "--", "test", "-w", c.dir).CombinedOutput(); err != nil {
			return fmt.Errorf("the postgres OS user cannot write %s (a parent folder is closed to it: %v %s); pass --dir under /tmp, or set OWED_DATABASE_URL",
				c.dir, err, strings.TrimSpace(string(out)))
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
	// pg_ctl -l appends; the file must be the postgres user's to write.
	f, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", c.log, err)
	}
	f.Close()
	if err := c.chown(c.log); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, pgctlTimeout)
	defer cancel()
	opts := fmt.Sprintf("-k '%s' -p %d", c.sock, pgPort)
	if err := c.run(sctx, "pg_ctl", "-D", c.data, "-l", c.log, "-w", "-o", opts, "start"); err != nil {
		return fmt.Errorf("start PostgreSQL (log %s): %w", c.log, err)
	}
	c.started = true
	return c.createRoles(ctx)
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

// stopLeftover stops a server an earlier run left running (owedctl was
// killed), so this run starts its own.
func (c *cluster) stopLeftover(ctx context.Context) {
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err != nil {
		return
	}
	if c.command(ctx, "pg_ctl", "-D", c.data, "status").Run() == nil {
		c.run(ctx, "pg_ctl", "-D", c.data, "-m", "fast", "-w", "stop")
	}
}

func (c *cluster) url(role string) string {
	return fmt.Sprintf("postgres://%s@/%s?host=%s&port=%d&sslmode=disable", role, dbName, c.sock, pgPort)
}

// createRoles creates the two roles before migrating: the migrations grant
// the application role its rights only when it exists.
func (c *cluster) createRoles(ctx context.Context) error {
	su, err := sql.Open("postgres", fmt.Sprintf("postgres://postgres@/postgres?host=%s&port=%d&sslmode=disable", c.sock, pgPort))
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
	return nil
}

const (
	qCreateRoles = `
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '` + ownerRole + `') THEN
        CREATE ROLE ` + ownerRole + ` LOGIN CREATEDB NOSUPERUSER NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '` + appRole + `') THEN
        CREATE ROLE ` + appRole + ` LOGIN NOSUPERUSER NOBYPASSRLS;
    END IF;
END
$$`
	qDatabaseExists = `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`
)

// restart restarts the server with pg_ctl's fast mode: open sessions are
// ended and every client must reconnect, as after a failover.
func (c *cluster) restart(ctx context.Context) error {
	if !c.started {
		return errors.New("restart PostgreSQL: the cluster is not running")
	}
	ctx, cancel := context.WithTimeout(ctx, pgctlTimeout)
	defer cancel()
	opts := fmt.Sprintf("-k '%s' -p %d", c.sock, pgPort)
	if err := c.run(ctx, "pg_ctl", "-D", c.data, "-l", c.log, "-w", "-m", "fast", "-o", opts, "restart"); err != nil {
		return fmt.Errorf("restart PostgreSQL (log %s): %w", c.log, err)
	}
	return nil
}

// pid is the postmaster's process id, or 0 when it is not running.
func (c *cluster) pid() int {
	b, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// stop stops the server with pg_ctl's fast mode (open sessions are ended,
// the data is checkpointed) and removes a temporary socket folder.
func (c *cluster) stop() error {
	if !c.started {
		return nil
	}
	c.started = false
	ctx, cancel := context.WithTimeout(context.Background(), pgctlTimeout)
	defer cancel()
	err := c.run(ctx, "pg_ctl", "-D", c.data, "-m", "fast", "-w", "stop")
	if c.tmpSock {
		os.RemoveAll(c.sock)
	}
	if err != nil {
		return fmt.Errorf("stop PostgreSQL: %w", err)
	}
	return nil
}
