package devstack

import (
	"context"
	"fmt"
	"time"

	"github.com/owedhq/owed/internal/launch"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/emulator"
)

// The controls below let a fault drill break the running stack on purpose:
// kill -9 a child and start it again, restart, crash or fail over
// PostgreSQL (standby.go), pause the scheduler, and set the queue's and the
// sandbox's injected faults. `owedctl dev` never calls them, and never sets
// Tuning.

// queueAdminTimeout bounds a call of the emulator's admin endpoint.
const queueAdminTimeout = 10 * time.Second

// Tuning holds the settings only a fault drill changes; zero fields keep
// the dev stack's own.
type Tuning struct {
	// WorkerConcurrency is each worker's OWED_WORKER_CONCURRENCY; a small
	// pool (4) when zero, because the pace, not the pool, limits a 40/m
	// provider. A drill raises it to keep many sends in flight.
	WorkerConcurrency int
	// SecondSweeperPort, when set, runs a second sweeper process
	// ("sweeper-2") there. The scheduler calls both every tick, so their
	// sweeps overlap, which the sweeper's lease makes safe.
	SecondSweeperPort int
	// SweeperEnv and WorkerEnv add OWED_ settings to every sweeper and
	// worker: a drill shortens leases and timeouts so healing fits a short
	// run. QueueEnv adds them to the queue emulator (--queue rest): a drill
	// that crashes PostgreSQL makes the emulator's commits durable too, as
	// a hosted queue's are.
	SweeperEnv, WorkerEnv, QueueEnv map[string]string
	// Standby runs a streaming standby of the local cluster, replicated
	// synchronously, and gives every client a URL naming both servers, for
	// FailoverPostgres.
	Standby bool
}

// Children returns the names of the running children in start order:
// queue, sandbox, sweeper[, sweeper-2], worker-1, ….
func (s *Stack) Children() []string {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	names := make([]string, len(s.procs))
	for i, p := range s.procs {
		names[i] = p.Name()
	}
	return names
}

func (s *Stack) child(name string) (int, *launch.Process, error) {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	for i, p := range s.procs {
		if p.Name() == name {
			return i, p, nil
		}
	}
	return 0, nil, fmt.Errorf("no child named %q; the children are queue, sandbox, sweeper, sweeper-2 (with a second sweeper) and worker-1 … worker-N", name)
}

// Kill sends SIGKILL to a child's process group, as `kill -9` does, waits
// for it to exit, and starts it again with the same settings, waiting for
// its health. The child gets no chance to finish anything: whatever it held
// (a send in flight, a lease, a publish not yet marked) must heal by the
// system's own rules. A killed queue server gets back what the services
// expect of it (queueRestarted).
func (s *Stack) Kill(ctx context.Context, name string) error {
	i, p, err := s.child(name)
	if err != nil {
		return err
	}
	if err := p.Kill(); err != nil {
		return err
	}
	np, err := p.Restart(ctx)
	if err != nil {
		return fmt.Errorf("restart %s: %w", name, err)
	}
	s.watch(np)
	s.procMu.Lock()
	s.procs[i] = np
	s.procMu.Unlock()
	if name == "queue" {
		return s.queueRestarted(ctx)
	}
	return nil
}

// RestartPostgres restarts the local cluster in fast mode, as `pg_ctl
// restart -m fast` does: every open session is ended, as a failover or a
// maintenance restart does.
// It needs the local cluster (not --database-url).
func (s *Stack) RestartPostgres(ctx context.Context) error {
	if s.cluster == nil {
		return fmt.Errorf("restart PostgreSQL: the stack uses an existing database (OWED_DATABASE_URL), not a cluster of its own")
	}
	return s.cluster.restart(ctx)
}

// CrashPostgres crashes the local cluster's primary as how says (kill -9
// of the postmaster, or pg_ctl stop -m immediate) and starts it again, once
// the crashed server's sessions are gone; the start recovers from the WAL,
// so what a client was told is committed is there and nothing else is.
// Every client must reconnect.
func (s *Stack) CrashPostgres(ctx context.Context, how Crash) error {
	if s.cluster == nil {
		return fmt.Errorf("crash PostgreSQL: the stack uses an existing database (OWED_DATABASE_URL), not a cluster of its own")
	}
	return s.cluster.crash(ctx, how)
}

// FailoverPostgres kills every process of the primary at once and promotes
// the standby Tuning.Standby started, which had every commit the primary
// acknowledged (synchronous replication); the clients reconnect to it
// through their URLs, which name both servers. The promoted server is the
// primary from then on (CrashPostgres, RestartPostgres), with no standby.
func (s *Stack) FailoverPostgres(ctx context.Context) error {
	if s.cluster == nil {
		return fmt.Errorf("fail over: the stack uses an existing database (OWED_DATABASE_URL), not a cluster of its own")
	}
	return s.cluster.failover(ctx)
}

// PostgresActivity returns what the stack's sessions on the primary are
// running, as the superuser sees it in pg_stat_activity: a drill aims a
// crash at a claim or a settle in flight with it.
func (s *Stack) PostgresActivity(ctx context.Context) ([]Activity, error) {
	if s.cluster == nil {
		return nil, fmt.Errorf("read the sessions: the stack uses an existing database (OWED_DATABASE_URL), not a cluster of its own")
	}
	return s.cluster.activity(ctx)
}

// PauseScheduler stops the built-in cron from calling the sweepers, as a
// hosted cron that stopped firing; ResumeScheduler starts it again. Missed
// ticks are not backfilled: the next sweep must find everything still owed.
func (s *Stack) PauseScheduler() { s.sched.paused.Store(true) }

// ResumeScheduler undoes PauseScheduler.
func (s *Stack) ResumeScheduler() { s.sched.paused.Store(false) }

// SetQueueFaults replaces the queue emulator's injected faults through its
// POST /admin/faults, guarded by the fault token, and remembers them for a restart. Only
// the emulator (--queue rest) injects faults.
func (s *Stack) SetQueueFaults(ctx context.Context, f emulator.Faults) error {
	if s.cfg.Queue != backends.REST {
		return fmt.Errorf("set the queue faults: only the queue emulator (--queue rest) injects them, this stack runs %s", s.cfg.Queue)
	}
	if err := NewAPIClient(s.ep.QueueURL, s.ep.QueueFaultToken, queueAdminTimeout).Post(ctx, "/admin/faults", f, nil); err != nil {
		return fmt.Errorf("set the queue faults: %w", err)
	}
	s.queueFaultsMu.Lock()
	s.queueFaults = &f
	s.queueFaultsMu.Unlock()
	return nil
}

// Sandbox returns a client of the running sandbox (stats, sends, faults).
func (s *Stack) Sandbox() *sandbox.Client { return s.sandbox }

// Queue returns the stack's client of the running queue.
func (s *Stack) Queue() queue.Queue { return s.queue }

// LogDir is the folder holding every child's log.
func (s *Stack) LogDir() string { return s.logDir() }

// Died is closed when a child exited without being stopped or killed on
// purpose; DiedErr says which.
func (s *Stack) Died() <-chan struct{} { return s.died }

// DiedErr names the child that died on its own, once Died is closed.
func (s *Stack) DiedErr() error {
	select {
	case <-s.died:
		return s.diedErr
	default:
		return nil
	}
}
