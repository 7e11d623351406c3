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
	"sync"
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
// owedctl like every other child. A drill may add a standby that streams
// from it synchronously, crash it, and fail over to the standby
// (standby.go).
//
// It is the starting user's alone: it listens on no TCP port, its socket
// and the folder holding it are 0700 (owned by the user the server runs
// as, whom root reaches anyway), and every connection is authenticated by
// peer, each role open only to the OS user who started the stack (and, as
// root, to the postgres OS user the server runs as, which streams to a
// drill's standby). Another local user can neither reach the socket nor,
// if it could, pass as any role (configureAccess).
type cluster struct {
	bin string
	// root is Dir and logDir the stack's log folder: a standby's folder
	// and log are placed beside the primary's.
	root, logDir string
	// postgres, when set, runs the programs as the postgres OS user: they
	// refuse to run as root.
	postgres *user.User
	cred     *syscall.Credential
	// primary is the server the stack writes to; standby, when a drill
	// added one, streams from it until failover promotes it.
	primary, standby *node
	// nodes are every server the stack's URLs name, in the order a client
	// tries them: the first primary, then the standby.
	nodes []*node
	// mu guards primary, standby and nodes where a drill's activity poll
	// may read them while a failover changes them, and su.
	mu sync.Mutex
	// su is a superuser pool on the primary (PostgresActivity), opened on
	// first use and closed when the primary crashes or changes.
	su *sql.DB
}

// node is one PostgreSQL server of the cluster.
type node struct {
	// name names its process and its log (name.log).
	name string
	dir  string // Dir/pg or Dir/pg-standby, owned by the postgres OS user when we are root
	data string
	log  string
	// sock is the socket folder: dir itself, or a folder under /tmp when
	// dir's path is too long for a socket.
	sock    string
	tmpSock bool
	port    int
	// settings are given on the command line after serverSettings.
	settings []string
	// server is the running postmaster.
	server *launch.Process
}

func newCluster(dir, logDir string) (*cluster, error) {
	bin, err := FindPostgres()
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin, root: dir, logDir: logDir}
	c.primary = c.newNode("postgres", "pg", pgPort)
	c.nodes = []*node{c.primary}
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

// newNode describes a server in Dir/folder, listening on port.
func (c *cluster) newNode(name, folder string, port int) *node {
	n := &node{name: name, dir: filepath.Join(c.root, folder), log: filepath.Join(c.logDir, name+".log"), port: port}
	n.data = filepath.Join(n.dir, "data")
	return n
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
	n := c.primary
	if err := c.prepare(ctx, n); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(n.data, "PG_VERSION")); err != nil {
		if err := c.initdb(ctx); err != nil {
			return err
		}
	} else {
		c.stopLeftover(ctx, n)
	}
	if err := c.configureAccess(n); err != nil {
		return err
	}
	if err := c.launch(ctx, n); err != nil {
		return err
	}
	return c.createRoles(ctx)
}

// prepare creates n's folder, closed to other users, and its socket folder.
func (c *cluster) prepare(ctx context.Context, n *node) error {
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", n.dir, err)
	}
	// A folder an earlier owedctl made was open to every user.
	if err := os.Chmod(n.dir, 0o700); err != nil {
		return fmt.Errorf("close %s to other users: %w", n.dir, err)
	}
	if err := c.chown(n.dir); err != nil {
		return err
	}
	if c.postgres != nil {
		// The postgres user must reach the folder through every parent; a
		// repository under /root, say, is closed to it.
		test, err := exec.LookPath("test")
		if err == nil {
			err = c.run(ctx, test, "-w", n.dir)
		}
		if err != nil {
			return fmt.Errorf("the postgres OS user cannot write %s (a parent folder is closed to it: %v); pass --dir under /tmp, or set OWED_DATABASE_URL",
				n.dir, err)
		}
	}
	n.sock = n.dir
	if len(filepath.Join(n.sock, ".s.PGSQL."+strconv.Itoa(n.port))) > maxSocketPath {
		d, err := os.MkdirTemp("", "owed-dev-pg-")
		if err != nil {
			return fmt.Errorf("create a socket folder: %w", err)
		}
		n.sock, n.tmpSock = d, true
		if err := os.Chmod(d, 0o700); err != nil {
			return err
		}
		if err := c.chown(d); err != nil {
			return err
		}
	}
	return nil
}

// launch starts n's postmaster and waits until it accepts connections.
func (c *cluster) launch(ctx context.Context, n *node) error {
	args := append([]string{"-D", n.data, "-k", n.sock, "-p", strconv.Itoa(n.port)}, serverSettings...)
	server, err := launch.Start(ctx, launch.Spec{Name: n.name, Path: filepath.Join(c.bin, "postgres"),
		Args: append(args, n.settings...),
		Env:  c.env(), Dir: c.workDir(), Credential: c.cred, Log: n.log,
		Ready: n.ready, ReadyTimeout: pgTimeout,
		// SIGINT is PostgreSQL's fast shutdown (pg_ctl -m fast): sessions
		// are ended, the data is checkpointed.
		StopSignal: syscall.SIGINT})
	if err != nil {
		return fmt.Errorf("start PostgreSQL (%s): %w", n.name, err)
	}
	n.server = server
	return nil
}

// serverSettings are given on the command line at every start, so they
// hold for a cluster an earlier owedctl made with other values in its
// postgresql.conf. The services refuse commits a crash can lose
// (service.CheckDurable), and the drill crashes this server on purpose:
// commits are durable here as in production. The socket is the owner's
// alone (see configureAccess).
var serverSettings = []string{"-c", "synchronous_commit=on", "-c", "unix_socket_permissions=0700"}

// ready is nil once n accepts a connection.
func (n *node) ready(ctx context.Context) error {
	db, err := sql.Open("postgres", n.superuserURL())
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

func (n *node) superuserURL() string {
	return fmt.Sprintf("postgres://postgres@/postgres?host=%s&port=%d&sslmode=disable", n.sock, n.port)
}

// initdb creates the cluster. Its authentication is replaced by
// configureAccess before every start; no TCP connection is ever accepted.
func (c *cluster) initdb(ctx context.Context) error {
	data := c.primary.data
	if err := c.run(ctx, "initdb", "-D", data, "-U", "postgres", "--auth-local=peer", "--auth-host=reject",
		"-E", "UTF8", "--no-locale"); err != nil {
		return err
	}
	conf := "\n# owedctl dev: a unix socket only (the socket folder and port are given at start).\n" +
		"listen_addresses = ''\nmax_connections = 200\n"
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("configure the cluster: %w", err)
	}
	defer f.Close()
	_, err = f.WriteString(conf)
	return err
}

// roles are the database roles a peer may connect as: the superuser (the
// stack's set-up, a drill's standby) and the stack's roles.
var roles = []string{"postgres", ownerRole, appRole, adminRole, queueRole, operatorRole}

// configureAccess writes the cluster's pg_hba.conf and pg_ident.conf, before
// every start, so a cluster an earlier owedctl made with trust
// authentication is closed too: every connection comes through the unix
// socket and is authenticated by peer, under the map "owed", which opens
// each role to the OS user who runs owedctl and, as root, to the postgres
// user the server runs as. No password exists, so the env file's URL needs
// none: `psql "$OWED_DATABASE_URL"` works for whoever started the stack.
func (c *cluster) configureAccess(n *node) error {
	me, err := user.Current()
	if err != nil {
		return fmt.Errorf("configure the cluster's authentication: who am I: %w", err)
	}
	users := []string{me.Username}
	if c.postgres != nil && c.postgres.Username != me.Username {
		users = append(users, c.postgres.Username)
	}
	hba := "# Written by owedctl at every start: peer authentication on the unix socket only.\n" +
		"local all all peer map=owed\nlocal replication all peer map=owed\n"
	ident := "# Written by owedctl at every start: the OS users who may use each role.\n"
	for _, u := range users {
		for _, r := range roles {
			ident += fmt.Sprintf("owed \"%s\" %s\n", u, r)
		}
	}
	for name, body := range map[string]string{"pg_hba.conf": hba, "pg_ident.conf": ident} {
		path := filepath.Join(n.data, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			return fmt.Errorf("configure the cluster's authentication: %w", err)
		}
		if err := c.chown(path); err != nil {
			return err
		}
	}
	return nil
}

// stopLeftover stops a server an earlier run left running (an owedctl from
// before the server died with it, or one started by hand), so this run
// starts its own.
func (c *cluster) stopLeftover(ctx context.Context, n *node) {
	if _, err := os.Stat(filepath.Join(n.data, "postmaster.pid")); err != nil {
		return
	}
	if c.run(ctx, "pg_ctl", "-D", n.data, "status") == nil {
		c.run(ctx, "pg_ctl", "-D", n.data, "-m", "fast", "-w", "stop")
	}
}

// url is role's URL to the stack's database. With a standby it names both
// servers, the first primary first, and asks for a read-write session, so
// a client reaches whichever is primary: the first until a failover, the
// promoted standby after it (lib/pq tries the hosts in order and skips a
// server in recovery).
func (c *cluster) url(role string) string {
	if len(c.nodes) == 1 {
		n := c.primary
		return fmt.Sprintf("postgres://%s@/%s?host=%s&port=%d&sslmode=disable", role, dbName, n.sock, n.port)
	}
	hosts, ports := make([]string, len(c.nodes)), make([]string, len(c.nodes))
	for i, n := range c.nodes {
		hosts[i], ports[i] = n.sock, strconv.Itoa(n.port)
	}
	return fmt.Sprintf("postgres://%s@/%s?host=%s&port=%s&sslmode=disable&target_session_attrs=read-write",
		role, dbName, strings.Join(hosts, ","), strings.Join(ports, ","))
}

func (c *cluster) superuserURL() string { return c.primary.superuserURL() }

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

// restart stops the primary in fast mode and starts it again, as `pg_ctl
// restart -m fast` does: open sessions are ended and every client must
// reconnect.
func (c *cluster) restart(ctx context.Context) error {
	n := c.primary
	if n.server == nil {
		return errors.New("restart PostgreSQL: the cluster is not running")
	}
	if err := n.server.Stop(pgTimeout, nil); err != nil {
		return fmt.Errorf("restart PostgreSQL: %w", err)
	}
	server, err := n.server.Restart(ctx)
	if err != nil {
		return fmt.Errorf("restart PostgreSQL: %w", err)
	}
	n.server = server
	return nil
}

// pid is the primary's postmaster's process id, or 0 when it is not
// running.
func (c *cluster) pid() int {
	if c.primary.server == nil {
		return 0
	}
	return c.primary.server.Pid()
}

// stop stops every server in fast mode (open sessions are ended, the data
// is checkpointed), or at once when force closes, and removes the
// temporary socket folders.
func (c *cluster) stop(force <-chan struct{}) error {
	c.resetSuperuser()
	var errs []error
	for _, n := range c.nodes {
		if n.server != nil {
			if err := n.server.Stop(pgTimeout, force); err != nil {
				errs = append(errs, fmt.Errorf("stop PostgreSQL (%s): %w", n.name, err))
			}
			n.server = nil
		}
		if n.tmpSock {
			os.RemoveAll(n.sock)
		}
	}
	return errors.Join(errs...)
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
		if s.cfg.Tuning.Standby {
			return roleURLs{}, fmt.Errorf("a standby needs the stack's own cluster, not the database in OWED_DATABASE_URL")
		}
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
	if s.cfg.Tuning.Standby {
		if err := c.addStandby(ctx); err != nil {
			return roleURLs{}, err
		}
		s.progress("standby")
	}
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
