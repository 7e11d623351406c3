// Package drill runs the whole of owed on one machine (the stack behind
// `owedctl dev`, on a throwaway database) under a chosen set of faults, with
// a workload of N rows, and then checks every invariant of docs/DESIGN.md it
// can observe from outside: nothing lost, nothing sent twice unless the
// ledger recorded the resend as a possible duplicate, no expired row sent,
// every refused row failed and dead-lettered, every row settled within the
// drain limit, and no secret in any log.
//
// It is `owedctl drill` and, bounded, a test in make test.
package drill

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/devstack"
	"github.com/owedhq/owed/internal/queue/backends"
)

// Fault is one kind of failure the drill injects.
type Fault string

// The faults, as named on the command line.
const (
	// WorkerKill kills -9 a random worker at random moments, repeatedly,
	// and starts it again; with many sends in flight and slow sends (the
	// timeout fault), some kills land between the provider's accept and
	// the ledger write.
	WorkerKill Fault = "worker-kill"
	// SweeperKill kills -9 a sweeper at random moments, and right after a
	// paused scheduler resumes (a large sweep publishing chunk after
	// chunk), so some kills land between a publish and its queued mark.
	SweeperKill Fault = "sweeper-kill"
	// QueueRestart kills -9 the queue server (the emulator, the JetStream
	// server or the local SQS server, which loses every message it held)
	// and starts it again.
	QueueRestart Fault = "queue-restart"
	// PGRestart restarts PostgreSQL with pg_ctl restart -m fast.
	PGRestart Fault = "pg-restart"
	// PGCrash crashes PostgreSQL three times, each aimed at a statement in
	// flight (a sweep's, a claim, a settle), by kill -9 of the postmaster
	// or pg_ctl stop -m immediate, and starts it again: it recovers from
	// its WAL.
	PGCrash Fault = "pg-crash"
	// PGFailover runs a streaming standby replicated synchronously beside
	// PostgreSQL, kills every process of the primary, and promotes the
	// standby; the services reconnect through their URLs, which name both.
	PGFailover Fault = "pg-failover"
	// Provider5xx makes the sandbox answer 20% of sends 503.
	Provider5xx Fault = "provider-5xx"
	// ProviderTimeouts makes 5% of sends hang past the worker's send
	// timeout.
	ProviderTimeouts Fault = "provider-timeouts"
	// Provider429Storm answers every send 429 with a long Retry-After for
	// a stretch.
	Provider429Storm Fault = "provider-429-storm"
	// ProviderPermanent adds rows to recipients the sandbox always refuses
	// (422): they must end failed and dead-lettered.
	ProviderPermanent Fault = "provider-permanent"
	// QueueRedelivery makes the queue deliver 10% of consumed messages a
	// second time at once (the emulator only).
	QueueRedelivery Fault = "queue-redelivery"
	// QueuePublish503 answers 10% of publishes 503 with a Retry-After (the
	// emulator only).
	QueuePublish503 Fault = "queue-publish-503"
	// SchedulerPause stops the scheduler for a stretch while rows fall
	// due, then resumes it.
	SchedulerPause Fault = "scheduler-pause"
	// Scale runs two sweepers and four workers instead of one and two.
	Scale Fault = "scale"
)

// AllFaults lists every fault in the order the table shows them.
var AllFaults = []Fault{WorkerKill, SweeperKill, QueueRestart, PGRestart, PGCrash, PGFailover, Provider5xx, ProviderTimeouts,
	Provider429Storm, ProviderPermanent, QueueRedelivery, QueuePublish503, SchedulerPause, Scale}

// emulatorFaults are injected by the queue emulator; no real queue can be
// told to misbehave this way.
var emulatorFaults = []Fault{QueueRedelivery, QueuePublish503}

// ParseFaults reads a comma-separated list of fault names, "all" or "none",
// for a drill on the queue backend queue: "all" is every fault that backend
// can have, and a fault only the emulator injects is refused on another.
func ParseFaults(s, queue string) ([]Fault, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "all":
		return slices.DeleteFunc(slices.Clone(AllFaults), func(f Fault) bool { return !applies(f, queue) }), nil
	case "", "none":
		return nil, nil
	}
	var out []Fault
	for _, name := range strings.Split(s, ",") {
		f := Fault(strings.TrimSpace(name))
		if !slices.Contains(AllFaults, f) {
			return nil, fmt.Errorf("unknown fault %q: want all, none or a comma-separated list of %s", name, faultNames())
		}
		if !applies(f, queue) {
			return nil, fmt.Errorf("fault %s: only the queue emulator injects it (--queue %s), not %s", f, backends.REST, queue)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// applies says whether a drill on queue can inject f.
func applies(f Fault, queue string) bool {
	return queue == backends.REST || !slices.Contains(emulatorFaults, f)
}

func faultNames() string {
	names := make([]string, len(AllFaults))
	for i, f := range AllFaults {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// Defaults of Config.
const (
	DefaultRows          = 5000
	DefaultTick          = time.Second
	DefaultRate          = "6000/m"
	DefaultDurationLimit = 10 * time.Minute
	DefaultPause         = 20 * time.Second
	DefaultStorm         = 10 * time.Second
	DefaultDir           = ".owed/drill"
)

// Config configures one drill. Zero fields take the defaults above.
type Config struct {
	// Dir holds the throwaway cluster and the logs; it is wiped first (it
	// must be a folder an earlier drill or `owedctl dev` made, or absent).
	Dir string
	// BinDir holds owedctl, sweeper and worker; the running executable's
	// folder when empty.
	BinDir string
	// Queue is the queue backend the stack runs (backends.Names);
	// backends.Default when empty.
	Queue string
	// Rows is the size of the workload.
	Rows   int
	Faults []Fault
	// Tick is the scheduler's sweep interval.
	Tick time.Duration
	// Rate is the sandbox's limit and the workers' shared pace.
	Rate string
	// Spread is the window the rows fall due over, from the start; faults
	// are injected during it. Zero scales it with Rows (1s per 100 rows, at
	// least 30s).
	Spread time.Duration
	// DurationLimit bounds the whole drill; rows still owed then are
	// reported as still owed, a broken invariant.
	DurationLimit time.Duration
	// StallLimit ends the drain early when no row has settled for this
	// long (0: only DurationLimit ends it). A drain that keeps settling
	// rows is slow, not stuck, and a loaded machine may take its time; a
	// drain where nothing settles for minutes is stuck, and waiting out
	// DurationLimit would only delay the report of its rows.
	StallLimit time.Duration
	// Pause is how long the scheduler stays paused (scheduler-pause).
	Pause time.Duration
	// Storm is how long the 429 storm lasts; its Retry-After is most of it.
	Storm time.Duration
	// Seed makes the fault timing repeatable; zero picks one from the
	// clock, and the result shows it.
	Seed uint64
	// Out receives progress lines.
	Out io.Writer
}

func (c *Config) applyDefaults() {
	c.Dir = cmp.Or(c.Dir, DefaultDir)
	c.Queue = cmp.Or(c.Queue, backends.Default)
	c.Rows = cmp.Or(c.Rows, DefaultRows)
	c.Tick = cmp.Or(c.Tick, DefaultTick)
	c.Rate = cmp.Or(c.Rate, DefaultRate)
	c.Spread = cmp.Or(c.Spread, max(30*time.Second, time.Duration(c.Rows/100)*time.Second))
	c.DurationLimit = cmp.Or(c.DurationLimit, DefaultDurationLimit)
	c.Pause = cmp.Or(c.Pause, DefaultPause)
	c.Storm = cmp.Or(c.Storm, DefaultStorm)
	c.Seed = cmp.Or(c.Seed, uint64(time.Now().UnixNano()))
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Validate reports the first unusable setting by its flag, with the
// defaults applied, so a command can tell a usage mistake from a failed
// drill before starting anything.
func (c Config) Validate() error {
	c.applyDefaults()
	return c.validate()
}

// validate names the flag behind the first unusable setting.
func (c Config) validate() error {
	switch {
	case c.Rows < 100:
		return fmt.Errorf("--rows %d: want at least 100, so every kind of row is in the workload", c.Rows)
	case c.Tick < time.Second:
		return fmt.Errorf("--tick %s: must be at least 1s", c.Tick)
	case c.Spread < 10*time.Second:
		return fmt.Errorf("--spread %s: must be at least 10s", c.Spread)
	case c.DurationLimit <= c.Spread:
		return fmt.Errorf("--duration-limit %s: must exceed --spread %s, leaving time to drain", c.DurationLimit, c.Spread)
	case c.StallLimit < 0:
		return fmt.Errorf("--stall-limit %s: must be 0 (off) or above", c.StallLimit)
	case c.Pause <= 0 || c.Pause >= c.Spread:
		return fmt.Errorf("--pause %s: must be above zero and below --spread %s", c.Pause, c.Spread)
	case c.Storm < 2*time.Second || c.Storm >= c.Spread:
		return fmt.Errorf("--storm %s: must be at least 2s and below --spread %s", c.Storm, c.Spread)
	}
	if err := devstack.CheckQueue(c.Queue); err != nil {
		return err
	}
	for _, f := range c.Faults {
		if !applies(f, c.Queue) {
			return fmt.Errorf("--faults %s: only the queue emulator injects it (--queue %s), not %s", f, backends.REST, c.Queue)
		}
	}
	return nil
}

func (c Config) has(f Fault) bool { return slices.Contains(c.Faults, f) }
