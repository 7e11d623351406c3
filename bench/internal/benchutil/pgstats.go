package benchutil

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/owedhq/owed/internal/testdb"
)

// PGCounters are one database's cumulative counters, read before and after
// a measured drain (Cost is the difference per delivery). The server's
// statistics are flushed by each backend at most once a second, and at its
// exit, so read them after the measured processes have exited or idled for
// a couple of seconds.
type PGCounters struct {
	// Xacts is committed plus rolled-back transactions (pg_stat_database).
	Xacts int64
	// Statements and ExecMs are pg_stat_statements' calls and
	// total_exec_time (milliseconds) in the database by the measured role
	// (every role when none is named), or -1 when pg_stat_statements is not
	// loaded (scripts/bench.sh loads it). The time is the executor's: it
	// leaves out parsing, planning and the wait for an autocommit's WAL
	// flush.
	Statements int64
	ExecMs     float64
	// NonHOT is n_tup_upd − n_tup_hot_upd over every table of the database
	// (pg_stat_user_tables): the updates that wrote a new entry into each
	// of the table's indexes.
	NonHOT int64
	// ServerCPU is the CPU time of every process of the PostgreSQL server
	// so far, -1 when /proc cannot tell (ServerCPU): the whole server's,
	// every database's and the background workers'.
	ServerCPU time.Duration
	// ProcessCPU is the CPU time of the benchmark's own process and of its
	// children that have exited and been waited for (getrusage, self and
	// children), -1 when it cannot be read: the sandbox provider and the
	// queue server a benchmark runs in its process, and the processes it
	// measures (owed's sweeper and workers, River's peer) once they exit.
	// With ServerCPU it is the whole machine's cost of a run.
	ProcessCPU time.Duration
	// ByStatement breaks Statements and ExecMs down by pg_stat_statements'
	// queryid (empty without it), ByTable NonHOT by table: what Breakdown
	// prints.
	ByStatement map[int64]StatementCounter
	ByTable     map[string]TableCounter
}

// StatementCounter is one statement's pg_stat_statements figures.
type StatementCounter struct {
	// Query is the normalised text, its constants as $n.
	Query  string
	Calls  int64
	ExecMs float64
	Rows   int64
	// Dirtied is shared_blks_dirtied (pages the statement made dirty),
	// WALBytes wal_bytes (the WAL it wrote, full-page images included):
	// what a row write costs beyond the executor's CPU.
	Dirtied, WALBytes int64
}

// TableCounter is one table's row writes (pg_stat_user_tables).
type TableCounter struct {
	Inserts, Updates, HOTUpdates, Deletes int64
}

// Counters reads the ledger database's PGCounters, the statements being the
// application role's: owed's sweeper and workers, not the benchmark's own
// reads (WaitSettled runs as the owner).
func (d *DB) Counters(ctx context.Context) (PGCounters, error) {
	return ReadCounters(ctx, d.Owner, testdb.AppUser())
}

// defaultIdleConns is database/sql's own default for SetMaxIdleConns.
const defaultIdleConns = 2

// FlushApp closes the application role pool's idle sessions, which makes
// their backends report their statistics as they exit. An idle backend
// otherwise reports them on a timer up to ten seconds later, so the rows a
// benchmark just scheduled would count inside the window it measures next.
func (d *DB) FlushApp() {
	d.App.SetMaxIdleConns(0)
	d.App.SetMaxIdleConns(defaultIdleConns)
}

// ReadCounters reads the PGCounters of the database db is connected to,
// counting the statements of role ("" counts every role's).
// pg_stat_statements is read as the superuser of scripts/with-postgres.sh
// (OWED_TEST_SUPERUSER_URL); without it the statement figures are -1.
func ReadCounters(ctx context.Context, db *sql.DB, role string) (PGCounters, error) {
	c := PGCounters{Statements: -1, ExecMs: -1}
	var name string
	var pid int
	if err := db.QueryRowContext(ctx, `SELECT current_database(), pg_backend_pid(),
			(SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database())`).
		Scan(&name, &pid, &c.Xacts); err != nil {
		return c, err
	}
	c.ServerCPU = ServerCPU(pid)
	c.ProcessCPU = ProcessCPU()
	var err error
	if c.ByTable, err = tableCounters(ctx, db); err != nil {
		return c, err
	}
	for _, t := range c.ByTable {
		c.NonHOT += t.Updates - t.HOTUpdates
	}
	su := os.Getenv("OWED_TEST_SUPERUSER_URL")
	if su == "" {
		return c, nil
	}
	sdb, err := sql.Open("postgres", su)
	if err != nil {
		return c, nil
	}
	defer sdb.Close()
	// Fails when the extension is not loaded; the figures are then absent.
	if byStmt, err := statementCounters(ctx, sdb, name, role); err == nil {
		c.ByStatement, c.Statements, c.ExecMs = byStmt, 0, 0
		for _, s := range byStmt {
			c.Statements += s.Calls
			c.ExecMs += s.ExecMs
		}
	}
	return c, nil
}

// statementCounters reads pg_stat_statements' entries for the database
// name and role ("" for every role), by queryid.
func statementCounters(ctx context.Context, sdb *sql.DB, name, role string) (map[int64]StatementCounter, error) {
	rs, err := sdb.QueryContext(ctx, `SELECT s.queryid, s.query, s.calls, s.total_exec_time, s.rows,
			s.shared_blks_dirtied, s.wal_bytes::bigint
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid JOIN pg_roles r ON r.oid = s.userid
		WHERE d.datname = $1 AND ($2 = '' OR r.rolname = $2)`, name, role)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[int64]StatementCounter{}
	for rs.Next() {
		var id int64
		var s StatementCounter
		if err := rs.Scan(&id, &s.Query, &s.Calls, &s.ExecMs, &s.Rows, &s.Dirtied, &s.WALBytes); err != nil {
			return nil, err
		}
		// One statement run by several roles has an entry for each.
		t := out[id]
		out[id] = StatementCounter{Query: s.Query, Calls: t.Calls + s.Calls, ExecMs: t.ExecMs + s.ExecMs, Rows: t.Rows + s.Rows,
			Dirtied: t.Dirtied + s.Dirtied, WALBytes: t.WALBytes + s.WALBytes}
	}
	return out, rs.Err()
}

// tableCounters reads pg_stat_user_tables in db's database.
func tableCounters(ctx context.Context, db *sql.DB) (map[string]TableCounter, error) {
	rs, err := db.QueryContext(ctx, `SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
		FROM pg_stat_user_tables`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[string]TableCounter{}
	for rs.Next() {
		var name string
		var t TableCounter
		if err := rs.Scan(&name, &t.Inserts, &t.Updates, &t.HOTUpdates, &t.Deletes); err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, rs.Err()
}

// breakdownStatements is how many statements Breakdown lists.
const breakdownStatements = 25

// Breakdown writes where the database's work went per delivery between two
// readings: the statements by execution time (calls, µs and rows per
// delivery), then every table whose rows were written (inserts, updates and
// the HOT ones among them, deletes, per delivery).
func Breakdown(w io.Writer, title string, before, after PGCounters, deliveries int) {
	n := float64(deliveries)
	fmt.Fprintf(w, "%s: per delivery, by statement (pg_stat_statements, by execution time):\n", title)
	type stmt struct {
		StatementCounter
		id int64
	}
	var stmts []stmt
	for id, a := range after.ByStatement {
		b := before.ByStatement[id]
		if d := a.Calls - b.Calls; d > 0 {
			stmts = append(stmts, stmt{StatementCounter{Query: a.Query, Calls: d, ExecMs: a.ExecMs - b.ExecMs, Rows: a.Rows - b.Rows,
				Dirtied: a.Dirtied - b.Dirtied, WALBytes: a.WALBytes - b.WALBytes}, id})
		}
	}
	slices.SortFunc(stmts, func(a, b stmt) int { return cmp.Compare(b.ExecMs, a.ExecMs) })
	fmt.Fprintf(w, "  %10s %10s %10s %10s %10s  %s\n", "calls", "exec µs", "rows", "dirtied", "WAL bytes", "statement")
	for i, s := range stmts {
		if i == breakdownStatements {
			fmt.Fprintf(w, "  … and %d more statements\n", len(stmts)-i)
			break
		}
		q := strings.Join(strings.Fields(s.Query), " ")
		if r := []rune(q); len(r) > 110 {
			q = string(r[:110]) + "…"
		}
		fmt.Fprintf(w, "  %10.4f %10.1f %10.4f %10.3f %10.0f  %s\n", float64(s.Calls)/n, s.ExecMs*1000/n, float64(s.Rows)/n,
			float64(s.Dirtied)/n, float64(s.WALBytes)/n, q)
	}
	fmt.Fprintf(w, "%s: per delivery, by table (pg_stat_user_tables):\n", title)
	fmt.Fprintf(w, "  %10s %10s %10s %10s  %s\n", "inserts", "updates", "HOT", "deletes", "table")
	names := slices.Sorted(maps.Keys(after.ByTable))
	for _, name := range names {
		a, b := after.ByTable[name], before.ByTable[name]
		d := TableCounter{Inserts: a.Inserts - b.Inserts, Updates: a.Updates - b.Updates, HOTUpdates: a.HOTUpdates - b.HOTUpdates, Deletes: a.Deletes - b.Deletes}
		if d == (TableCounter{}) {
			continue
		}
		fmt.Fprintf(w, "  %10.4f %10.4f %10.4f %10.4f  %s\n", float64(d.Inserts)/n, float64(d.Updates)/n, float64(d.HOTUpdates)/n, float64(d.Deletes)/n, name)
	}
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux architecture Go runs on).
const userHZ = 100

// ServerCPU returns the CPU time (user and system) the PostgreSQL server has
// used so far, found from one of its backends' pid: the postmaster's own,
// its exited children's (which it has waited for), and every live child's
// (backends, autovacuum, the WAL writer, the checkpointer). It returns -1
// when /proc cannot tell (not Linux, or the server is on another host).
func ServerCPU(backend int) time.Duration {
	postmaster, _, err := procStat(backend)
	if err != nil {
		return -1
	}
	_, ticks, err := procStat(postmaster)
	if err != nil {
		return -1
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		// A child that exits meanwhile is gone from here and counted in the
		// postmaster's children's times at its next reading.
		if parent, t, err := procStat(pid); err == nil && parent == postmaster {
			ticks += t
		}
	}
	return time.Duration(ticks) * time.Second / userHZ
}

// ProcessCPU returns the CPU time (user and system) of this process and of
// its children that have exited and been waited for, or -1 when getrusage
// fails.
func ProcessCPU() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			return -1
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

// procStat reads a process's parent pid and its CPU ticks (utime, stime,
// and its waited-for children's cutime and cstime) from /proc/<pid>/stat.
func procStat(pid int) (parent int, ticks int64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	// "pid (comm) state ppid …": comm may hold spaces and parentheses, so
	// the fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is the state (field 3), so field n is f[n-3]: ppid 4, utime 14,
	// stime 15, cutime 16, cstime 17.
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	if parent, err = strconv.Atoi(string(f[1])); err != nil {
		return 0, 0, err
	}
	for _, n := range f[11:15] {
		t, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return 0, 0, err
		}
		ticks += t
	}
	return parent, ticks, nil
}

// Cost is what the database did per delivery between two readings; a
// figure the readings lack is -1.
type Cost struct {
	Xacts, Statements, NonHOT float64
	// ExecMicros is pg_stat_statements' execution time, ServerCPUMicros the
	// server's CPU, both in microseconds per delivery.
	ExecMicros, ServerCPUMicros float64
	// MachineCPUMicros is the PostgreSQL server's CPU and the benchmark's
	// processes' (PGCounters.ProcessCPU) per delivery: what a delivery
	// costs the machine. OutsideCPUMicros is the processes' part alone.
	MachineCPUMicros, OutsideCPUMicros float64
}

// CostOf divides the counters' growth from before to after by deliveries.
func CostOf(before, after PGCounters, deliveries int) Cost {
	n := float64(deliveries)
	c := Cost{Xacts: float64(after.Xacts-before.Xacts) / n, NonHOT: float64(after.NonHOT-before.NonHOT) / n,
		Statements: -1, ExecMicros: -1, ServerCPUMicros: -1, MachineCPUMicros: -1, OutsideCPUMicros: -1}
	if before.Statements >= 0 && after.Statements >= 0 {
		c.Statements = float64(after.Statements-before.Statements) / n
		c.ExecMicros = (after.ExecMs - before.ExecMs) * 1000 / n
	}
	if before.ServerCPU >= 0 && after.ServerCPU >= 0 {
		c.ServerCPUMicros = float64(after.ServerCPU-before.ServerCPU) / float64(time.Microsecond) / n
	}
	if before.ProcessCPU >= 0 && after.ProcessCPU >= 0 {
		c.OutsideCPUMicros = float64(after.ProcessCPU-before.ProcessCPU) / float64(time.Microsecond) / n
		if c.ServerCPUMicros >= 0 {
			c.MachineCPUMicros = c.ServerCPUMicros + c.OutsideCPUMicros
		}
	}
	return c
}

// Targets are issue 26's for owed's end-to-end run: Postgres time per
// delivery and non-HOT updates per delivered row.
const (
	TargetExecMicros = 100
	TargetNonHOT     = 1
)

// CostRows reports the runs' costs as rows named "<prefix> <figure>,
// <suffix>", each also a column of system's line in the peer comparison
// (PrintPeers). statements names whose statements were counted. With
// targets the rows carry issue 26's targets.
func CostRows(prefix, suffix, statements, system string, costs []Cost, targets bool) []Row {
	figure := func(get func(Cost) float64) (Summary, bool) {
		var xs []float64
		for _, c := range costs {
			if v := get(c); v >= 0 {
				xs = append(xs, v)
			}
		}
		return Summarise(xs), len(xs) > 0
	}
	var rows []Row
	add := func(name, unit, column string, get func(Cost) float64, target string, pass func(float64) bool) {
		s, ok := figure(get)
		if !ok {
			return
		}
		r := Row{Name: prefix + " " + name + ", " + suffix, Value: s, Unit: unit, System: system, Column: column}
		if targets && pass != nil {
			r.Target, r.Pass = target, Check(pass(s.Median))
		}
		rows = append(rows, r)
	}
	add("transactions per delivery (pg_stat_database)", "xact", ColXacts, func(c Cost) float64 { return c.Xacts }, "", nil)
	add("statements per delivery (pg_stat_statements, "+statements+")", "stmt", ColStatements,
		func(c Cost) float64 { return c.Statements }, "", nil)
	add("Postgres execution time per delivery (pg_stat_statements total_exec_time, "+statements+")", "µs", ColExecMicros,
		func(c Cost) float64 { return c.ExecMicros }, fmt.Sprintf("≤ %d", TargetExecMicros), func(v float64) bool { return v <= TargetExecMicros })
	add("Postgres server CPU per delivery (/proc, every process of the server)", "µs", ColServerCPU,
		func(c Cost) float64 { return c.ServerCPUMicros }, "", nil)
	add("CPU per delivery outside Postgres (getrusage: this process and the measured processes, exited)", "µs",
		ColOutsideCPU, func(c Cost) float64 { return c.OutsideCPUMicros }, "", nil)
	add("machine CPU per delivery (Postgres server and the processes above)", "µs", ColMachineCPU,
		func(c Cost) float64 { return c.MachineCPUMicros }, "", nil)
	add("non-HOT updates per delivered row (pg_stat_user_tables, every table)", "upd", ColNonHOT,
		func(c Cost) float64 { return c.NonHOT }, fmt.Sprintf("≤ %d", TargetNonHOT), func(v float64) bool { return v <= TargetNonHOT })
	return rows
}

// EmptyDB is a database with no schema of owed's, for a peer that brings its
// own (bench/river), on the benchmark server and owned by its owner role.
type EmptyDB struct {
	Name string
	// URL connects as the owner, the database's owner.
	URL string
	// Owner is one connection on URL, the benchmark's own: every other
	// session in the database is the peer's.
	Owner *sql.DB
	admin string
}

// NewEmptyDB creates an empty database named prefix plus a random suffix.
func NewEmptyDB(ctx context.Context, prefix string) (*EmptyDB, error) {
	admin, err := serverURL()
	if err != nil {
		return nil, err
	}
	adm, err := sql.Open("postgres", admin)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	d := &EmptyDB{Name: prefix + "_" + strconv.FormatInt(time.Now().UnixNano(), 36), admin: admin}
	if _, err := adm.ExecContext(ctx, "CREATE DATABASE "+d.Name); err != nil {
		return nil, fmt.Errorf("create database %s: %w", d.Name, err)
	}
	if d.URL, err = databaseURL(admin, d.Name); err == nil {
		d.Owner, err = sql.Open("postgres", d.URL)
	}
	if err == nil {
		d.Owner.SetMaxOpenConns(1)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Close drops the database, ending any connection a killed process left.
func (d *EmptyDB) Close() {
	if d.Owner != nil {
		d.Owner.Close()
	}
	adm, err := sql.Open("postgres", d.admin)
	if err == nil {
		defer adm.Close()
		_, err = adm.Exec("DROP DATABASE IF EXISTS " + d.Name + " WITH (FORCE)")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchutil: drop %s: %v\n", d.Name, err)
	}
}

// databaseURL is the server URL base with its database replaced by name.
func databaseURL(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("the server URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}
