package ledger

import (
	"database/sql"

	"github.com/owedhq/owed/internal/clock"
)

// The ledger's operations are split by the role that calls them, so a
// package depends on the part it uses, not on every statement the ledger
// runs. Each role is a handle on the one core (pool, clock, prepared
// statements); a method's role says who calls it:
//
//   - Sweep is the sweeper's: the survey, the lease and its bookkeeping
//     (mark queued, release, expire, set aside), the send rates its budget
//     reads, the history sample and the default grace the sweeper stores.
//   - Work is the worker's: the claim, the heartbeat and the check before
//     the send, every settle, release and hand-back, and the undeliverable
//     marks it reads and writes.
//   - Scheduling is the scheduling API's and the materialiser's writes:
//     schedule, cancel, reschedule, update, quiet hours and erasure.
//   - Reads is every read an operator or the API answers from: a row, a
//     list, counts, stats, the backlog, the history, the audit trail.
//   - Actions is on-call's writes, each on the operators' trail: redrive,
//     a row's cancel, reschedule or send-now, an undeliverable mark's
//     clear, an audit line.
//   - Receipts records the providers' delivery receipts.
//
// New returns a *Ledger, which embeds every role over one core: a
// composition root (a main, a service assembling its parts, a test)
// builds one and hands each part the role it calls. A part's constructor
// takes the role through its Has* interface (HasSweep, HasWork, …), which
// the role itself and a *Ledger both satisfy, and keeps only the role: the
// caller passes whichever it holds, and the part can call nothing outside
// its role. (The receipt handler takes its own one-method interface,
// receipt.Recorder, which Receipts satisfies.) A test in this package (roles_test.go) fails when a package
// outside the composition roots names *Ledger.

// Sweep is the sweeper's role (see the roles above).
type Sweep struct{ *core }

// Work is the worker's role.
type Work struct{ *core }

// Scheduling is the scheduling API's and the materialiser's writes.
type Scheduling struct{ *core }

// Reads is the operators' and the API's reads.
type Reads struct{ *core }

// Actions is on-call's audited writes.
type Actions struct{ *core }

// Receipts records the providers' delivery receipts.
type Receipts struct{ *core }

// Ledger is every role over one core: what New returns and a composition
// root holds. Its methods are its roles'.
type Ledger struct {
	*core
	*Sweep
	*Work
	*Scheduling
	*Reads
	*Actions
	*Receipts
}

// New returns a Ledger using db, telling the time by clk (nil: clock.Real).
func New(db *sql.DB, clk clock.Clock) *Ledger {
	if clk == nil {
		clk = clock.Real()
	}
	c := &core{db: db, clk: clk}
	return &Ledger{core: c, Sweep: &Sweep{c}, Work: &Work{c}, Scheduling: &Scheduling{c}, Reads: &Reads{c},
		Actions: &Actions{c}, Receipts: &Receipts{c}}
}

// HasSweep is a Sweep or a *Ledger.
type HasSweep interface{ SweepRole() *Sweep }

// HasWork is a Work or a *Ledger.
type HasWork interface{ WorkRole() *Work }

// HasScheduling is a Scheduling or a *Ledger.
type HasScheduling interface{ SchedulingRole() *Scheduling }

// HasReads is a Reads or a *Ledger.
type HasReads interface{ ReadsRole() *Reads }

// HasActions is an Actions or a *Ledger.
type HasActions interface{ ActionsRole() *Actions }

// SweepRole returns l.
func (l *Sweep) SweepRole() *Sweep { return l }

// WorkRole returns l.
func (l *Work) WorkRole() *Work { return l }

// SchedulingRole returns l.
func (l *Scheduling) SchedulingRole() *Scheduling { return l }

// ReadsRole returns l.
func (l *Reads) ReadsRole() *Reads { return l }

// ActionsRole returns l.
func (l *Actions) ActionsRole() *Actions { return l }
