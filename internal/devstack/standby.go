package devstack

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/launch"
)

// What a fault drill does to the cluster: crash the primary and start it
// again, and fail over to a standby. `owedctl dev` never calls these.

// standbyName is the standby's cluster_name, which its walreceiver gives
// the primary as its application_name, and which the primary's
// synchronous_standby_names names.
const standbyName = "owed_standby"

// orphanGrace is how long a crashed postmaster's sessions may go on before
// recover kills them: after a kill -9 of the postmaster alone they live
// until they notice (each at its next wait), and the new postmaster refuses
// to start while any still holds the old shared memory.
const orphanGrace = 10 * time.Second

// Crash is how CrashPostgres brings the server down.
type Crash string

const (
	// CrashKill is kill -9 of the postmaster alone: its sessions run on
	// until they notice it is gone, as after the OOM killer chose it.
	CrashKill Crash = "kill -9 of the postmaster"
	// CrashImmediate is pg_ctl stop -m immediate: every server process
	// quits at once, without a checkpoint.
	CrashImmediate Crash = "pg_ctl stop -m immediate"
)

// Activity is one session's statement as pg_stat_activity shows it: State
// is "active" while it runs, "idle in transaction" between the statements
// of an open transaction.
type Activity struct{ State, Query string }

// standbyNode describes the standby: Dir/pg-standby on the next port. It
// is started with no synchronous standby of its own, so once promoted
// (with no standby left) its commits do not wait for one, and it retries a
// lost primary every half second, so a crashed primary's commits, which
// wait for it, do not wait long.
func (c *cluster) standbyNode() *node {
	n := c.newNode("postgres-standby", "pg-standby", pgPort+1)
	n.settings = []string{"-c", "cluster_name=" + standbyName, "-c", "synchronous_standby_names=",
		"-c", "wal_retrieve_retry_interval=500ms"}
	return n
}

// addStandby copies the running primary with pg_basebackup into a streaming
// standby, starts it, and restarts the primary with the standby named in
// synchronous_standby_names, so every commit waits until the standby has
// flushed it (synchronous_commit = on): what a client was told is committed
// survives a failover. The setting is given on the primary's command line,
// never written into its data folder, so a later `owedctl dev` on the
// folder does not wait for a standby that is gone.
func (c *cluster) addStandby(ctx context.Context) error {
	n, p := c.standbyNode(), c.primary
	c.stopLeftover(ctx, n)
	if err := c.prepare(ctx, n); err != nil {
		return err
	}
	if err := os.RemoveAll(n.data); err != nil {
		return fmt.Errorf("remove an earlier standby: %w", err)
	}
	// -R writes standby.signal and the primary_conninfo the standby
	// streams with: the primary's socket, as the superuser, by peer.
	if err := c.run(ctx, "pg_basebackup", "-D", n.data, "-h", p.sock, "-p", strconv.Itoa(p.port), "-U", "postgres",
		"-X", "stream", "-R", "-c", "fast"); err != nil {
		return fmt.Errorf("copy the primary for its standby: %w", err)
	}
	if err := c.launch(ctx, n); err != nil {
		return err
	}
	c.mu.Lock()
	c.standby, c.nodes = n, append(c.nodes, n)
	c.mu.Unlock()
	if err := waitReplication(ctx, p, "state = 'streaming'"); err != nil {
		return err
	}
	if err := p.server.Stop(pgTimeout, nil); err != nil {
		return fmt.Errorf("restart the primary to wait for its standby: %w", err)
	}
	p.settings = append(p.settings, "-c", "synchronous_standby_names="+standbyName)
	if err := c.launch(ctx, p); err != nil {
		return err
	}
	return waitReplication(ctx, p, "sync_state = 'sync'")
}

// waitReplication waits until the standby's replication from p shows cond.
func waitReplication(ctx context.Context, p *node, cond string) error {
	db, err := sql.Open("postgres", p.superuserURL())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, pgTimeout)
	defer cancel()
	for {
		var ok bool
		err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE application_name = $1 AND "+cond+")",
			standbyName).Scan(&ok)
		if err == nil && ok {
			return nil
		}
		if !clock.Sleep(ctx, 100*time.Millisecond) {
			return fmt.Errorf("the standby's replication never showed %s (%v); see %s", cond, err, p.log)
		}
	}
}

// crash brings the primary down as how says and starts it again.
func (c *cluster) crash(ctx context.Context, how Crash) error {
	n := c.primary
	old := n.server
	if old == nil {
		return errors.New("crash PostgreSQL: the cluster is not running")
	}
	switch how {
	case CrashKill:
		if err := syscall.Kill(old.Pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill -9 the postmaster: %w", err)
		}
	case CrashImmediate:
		if err := c.run(ctx, "pg_ctl", "-D", n.data, "-m", "immediate", "-w", "stop"); err != nil {
			return err
		}
	default:
		return fmt.Errorf("crash PostgreSQL: unknown crash %q", how)
	}
	select {
	case <-old.Done():
	case <-time.After(pgTimeout):
		return fmt.Errorf("crash PostgreSQL (%s): the postmaster did not exit within %s", how, pgTimeout)
	}
	c.resetSuperuser()
	return c.recover(ctx, n, old, how)
}

// recover starts n again after a crash; the server recovers from its WAL.
// Its start is tried until the crashed postmaster's sessions are gone (see
// orphanGrace), killing them when they outstay it.
func (c *cluster) recover(ctx context.Context, n *node, old *launch.Process, how Crash) error {
	began := time.Now()
	killed := false
	for {
		server, err := old.Restart(ctx)
		if err == nil {
			n.server = server
			return nil
		}
		if time.Since(began) > pgTimeout {
			return fmt.Errorf("start PostgreSQL again after %s: %w", how, err)
		}
		if !killed && time.Since(began) > orphanGrace {
			// The crashed server's process group holds its sessions.
			syscall.Kill(-old.Pid(), syscall.SIGKILL)
			killed = true
		}
		if !clock.Sleep(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// failover kills every process of the primary at once, as a lost host,
// promotes the standby, and waits until it takes writes. The stack's URLs
// name both servers (url), so every client reconnects to it by itself.
func (c *cluster) failover(ctx context.Context) error {
	p, s := c.primary, c.standby
	if s == nil {
		return errors.New("fail over: the cluster has no standby (a drill with pg-failover adds one)")
	}
	if err := p.server.Kill(); err != nil {
		return fmt.Errorf("fail over: %w", err)
	}
	if err := c.run(ctx, "pg_ctl", "-D", s.data, "-w", "-t", strconv.Itoa(int(pgTimeout/time.Second)), "promote"); err != nil {
		return fmt.Errorf("fail over: %w", err)
	}
	c.mu.Lock()
	c.primary, c.standby = s, nil
	c.mu.Unlock()
	c.resetSuperuser()
	db, err := sql.Open("postgres", s.superuserURL())
	if err != nil {
		return err
	}
	defer db.Close()
	wctx, cancel := context.WithTimeout(ctx, pgTimeout)
	defer cancel()
	for {
		var recovering bool
		err := db.QueryRowContext(wctx, "SELECT pg_is_in_recovery()").Scan(&recovering)
		if err == nil && !recovering {
			return nil
		}
		if !clock.Sleep(wctx, 100*time.Millisecond) {
			return fmt.Errorf("fail over: the promoted standby still does not take writes (%v); see %s", err, s.log)
		}
	}
}

// activity returns the statements the stack's sessions on the primary are
// running or are in the middle of a transaction for.
func (c *cluster) activity(ctx context.Context) ([]Activity, error) {
	c.mu.Lock()
	if c.su == nil {
		db, err := sql.Open("postgres", c.primary.superuserURL())
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		db.SetMaxOpenConns(1)
		c.su = db
	}
	db := c.su
	c.mu.Unlock()
	rows, err := db.QueryContext(ctx, `
SELECT coalesce(state, ''), query FROM pg_stat_activity
 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname = $1`, dbName)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Activity
	for rows.Next() {
		var a Activity
		if err := rows.Scan(&a.State, &a.Query); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// resetSuperuser closes the superuser pool of a primary that crashed or
// was replaced; activity opens a new one.
func (c *cluster) resetSuperuser() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.su != nil {
		c.su.Close()
		c.su = nil
	}
}
