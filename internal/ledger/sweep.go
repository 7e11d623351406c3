package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/lib/pq"
)

// Leased is one row the sweeper holds and must publish.
type Leased struct {
	ID     int64
	Tenant string
	DueAt  time.Time
	// Republish is true when the row was published before (its message was
	// lost, acked or dead-lettered, and its lease ran out); the message goes
	// out again under the same idempotency key but a new queue generation.
	Republish bool
	// QueueGeneration is the row's queue generation as leased: its message
	// goes out under QueueKey(prefix, ID, DueAt, QueueGeneration).
	QueueGeneration int
	// Account is the row's provider account: its index in the lease's
	// Sharing.Accounts (0 without accounts).
	Account int
	// Requeue says the row's lease ran out (leased, queued or sending),
	// where the others were pending.
	Requeue bool
	// NotBefore is when a row a worker handed back to the ledger
	// (HandBack) may be sent, zero for any other row: its message is
	// published to surface at the later of it and DueAt.
	NotBefore time.Time
	// Queued says the lease wrote the row queued, as published
	// (LeaseParams.RequeueAfter): it needs no MarkQueued after its
	// publish, and ReleaseLeased hands it back as it does a leased row.
	Queued bool
}

// Slice says which owed rows one Lease takes.
type Slice int

const (
	// SliceOwed takes every owed row: pending, or its lease ran out.
	SliceOwed Slice = iota
	// SlicePending takes pending rows only (never published, handed back,
	// rescheduled or redriven).
	SlicePending
	// SliceRequeue takes only rows whose lease ran out (leased, queued or
	// sending): a sweep that died before its mark, a lost message, a worker
	// that died; and the waits handed to the ledger (HandBack) whose
	// not-before falls within the publish-ahead window. A run gives them a
	// slice of their own so they never starve pending rows.
	SliceRequeue
)

// LiveForDefault is Sharing.LiveFor when it is zero: a lease that ends
// more than a day ahead is a wait parked in the ledger, not work in flight.
const LiveForDefault = 24 * time.Hour

// Account is one provider account the lease shares capacity between. The
// workers route each channel to a provider, and the channels routed to one
// provider share its account and its pace.
type Account struct {
	// Name is the provider's name ("twilio", "sandbox"): on-call's hold of
	// any of its accounts (a pace row named "twilio" or "twilio:…") leaves
	// the account's rows out of the lease.
	Name string
	// Channels are the channels routed to the account.
	Channels []string
	// Cap bounds the rows the account may have in flight (leased, queued
	// or sending); zero or less is no bound.
	Cap int
}

// Sharing is how the lease shares capacity: between Accounts (the first
// carries every channel none lists; none is one account for every channel
// without a cap), and between the tenants of each, round-robin. Paused
// tenants and held accounts take no capacity and are never leased.
type Sharing struct {
	Accounts []Account
	// LiveFor bounds the leases that count as work in flight: a row whose
	// lease ends further ahead is a wait parked in the ledger (a retry
	// hours away, or a lease an application wrote) and holds no capacity.
	// Zero is LiveForDefault.
	LiveFor time.Duration
}

// args returns the channels, the account of each (1-based, as SQL counts),
// the accounts' names and their caps.
func (s Sharing) args() (channels []string, accountOf []int64, names []string, caps []int64) {
	if len(s.Accounts) == 0 {
		return []string{}, []int64{}, []string{""}, []int64{math.MaxInt32}
	}
	for i, a := range s.Accounts {
		for _, ch := range a.Channels {
			channels, accountOf = append(channels, ch), append(accountOf, int64(i+1))
		}
		names = append(names, a.Name)
		c := int64(a.Cap)
		if c <= 0 || c > math.MaxInt32 {
			c = math.MaxInt32
		}
		caps = append(caps, c)
	}
	return channels, accountOf, names, caps
}

func (s Sharing) liveFor() time.Duration {
	if s.LiveFor <= 0 {
		return LiveForDefault
	}
	return s.LiveFor
}

// LeaseParams bound one slice of a sweep.
type LeaseParams struct {
	// Limit caps the rows leased (OWED_SWEEP_BATCH).
	Limit int
	// Ahead also leases rows falling due within this window, to be published
	// with a delay so they surface at their due second (OWED_PUBLISH_AHEAD).
	Ahead time.Duration
	// For is how long the sweeper holds the rows before another sweep may
	// take them (a crashed sweeper heals when it runs out).
	For time.Duration
	// RequeueAfter, when above zero, writes the pending rows the slice
	// takes straight to queued, as published (Leased.Queued), their lease
	// ending RequeueAfter after the later of now and their due time: what
	// MarkQueued writes, so the sweep marks only the other rows after
	// their publish. That saves a row write per delivery; a sweeper that
	// dies before the publish leaves those rows to the lapsed-lease
	// requeue RequeueAfter after their due time instead of For after the
	// lease (docs/reliability.md). Zero leases every row.
	RequeueAfter time.Duration
	// Slice picks the rows; the zero value is SliceOwed.
	Slice Slice
	// Share is the part of each account's room the slice may take, above
	// zero and at most one; zero is all of it. A run's requeue slice takes
	// half, so rows falling due keep the rest.
	Share float64
	Sharing
}

func (p LeaseParams) validate() error {
	switch {
	case p.Limit <= 0:
		return fmt.Errorf("ledger: lease limit must be above zero, got %d", p.Limit)
	case p.For <= 0:
		return fmt.Errorf("ledger: lease duration must be above zero, got %s", p.For)
	case p.RequeueAfter < 0:
		return fmt.Errorf("ledger: requeue-after must not be negative, got %s", p.RequeueAfter)
	case p.Ahead < 0:
		return fmt.Errorf("ledger: publish-ahead window must not be negative, got %s", p.Ahead)
	case p.Slice < SliceOwed || p.Slice > SliceRequeue:
		return fmt.Errorf("ledger: unknown lease slice %d", p.Slice)
	case p.Share < 0 || p.Share > 1:
		return fmt.Errorf("ledger: lease share must be 0 (all) to 1, got %g", p.Share)
	}
	return nil
}

// args returns the arguments of qLeaseFair and qExplainLease for p: the
// slice travels as its number, which owed_sweep_fair_lease_sql reads (0
// owed, 1 pending, 2 requeue).
func (p LeaseParams) args(now any) []any {
	channels, accountOf, names, caps := p.Sharing.args()
	share := p.Share
	if share == 0 {
		share = 1
	}
	return []any{int(p.Slice), now, seconds(p.For), seconds(p.Ahead), p.Limit, pq.Array(channels),
		pq.Array(accountOf), pq.Array(names), pq.Array(caps), share, seconds(p.liveFor())}
}

// leaseArgs are qLeaseFair's arguments for p: args and the requeue-after
// in seconds, NULL when it is zero (every row leased).
func (p LeaseParams) leaseArgs(now any) []any {
	var requeueAfter any
	if p.RequeueAfter > 0 {
		requeueAfter = seconds(p.RequeueAfter)
	}
	return append(p.args(now), requeueAfter)
}

// AccountRoom is what one slice saw of an account.
type AccountRoom struct {
	// InFlight counts the account's rows a live lease held (leased, queued
	// or sending, due by the publish-ahead horizon) before the slice.
	InFlight int
	// Room is what the slice could take for rows already due: the cap
	// less the rows in flight already due, times the slice's share.
	Room int
	// Held counts the rows the slice left for want of room: the cap, not
	// the slice's limit, held them back.
	Held int
	// More says a tenant of the account may have more rows waiting than
	// the slice looked at (each tenant's part of the room was read): a run
	// leases another slice.
	More bool
}

// LeaseResult is one slice's answer.
type LeaseResult struct {
	// Rows are the rows leased, in the slice's order: the order to publish
	// them in, so the queue's order is the lease's.
	Rows []Leased
	// SetAside are the rows the slice settled failed instead of leasing:
	// no message can carry their due time, or a shared statement could not
	// apply them (last_error says why).
	SetAside []int64
	// Accounts is what the slice saw of each account, in Sharing.Accounts'
	// order (one entry without accounts). Counted is false when nothing was
	// owed to lease: the slice then answers without counting, and Accounts
	// are zeros.
	Accounts []AccountRoom
	Counted  bool
	// Now is the database's instant of the slice: publish delays count
	// from it.
	Now time.Time
}

// Lease is LeaseSlice's rows.
func (l *Sweep) Lease(ctx context.Context, p LeaseParams) ([]Leased, error) {
	r, err := l.LeaseSlice(ctx, p)
	return r.Rows, err
}

// LeaseSlice claims up to p.Limit owed rows of p.Slice in one statement
// (owed_sweep_lease_fair_not_before, internal/ledger/sql/sweep.sql): rows
// that are pending, or whose lease (leased, queued or sending) ran out, or
// that a worker handed back (HandBack) with a not-before within p.Ahead
// (answered in Leased.NotBefore), shared
// between p.Accounts by each one's room under its cap and, within an
// account, round-robin between the tenants with rows waiting, each
// tenant's rows oldest owed first (owed since greatest(due_at,
// created_at)). Rows past their expiry, of a paused tenant or of a held
// account are never returned. Concurrent calls never return the same row:
// slices that would lease take turns (owed_sweep_lease_fair_queued's
// advisory lock), each reading what the one before it left.
// A row published before gets its next queue generation here.
func (l *Sweep) LeaseSlice(ctx context.Context, p LeaseParams) (LeaseResult, error) {
	if err := p.validate(); err != nil {
		return LeaseResult{}, err
	}
	res := LeaseResult{Accounts: make([]AccountRoom, max(1, len(p.Accounts)))}
	err := l.queryAllTenantsTx(ctx, qLeaseFair, p.leaseArgs(l.now()), func(rows *sql.Rows) error {
		var (
			id, gen, inFlight, room, held sql.NullInt64
			ten, state                    sql.NullString
			due, notBefore                sql.NullTime
			republish, more, requeue      sql.NullBool
			account                       int
			ord                           sql.NullInt64
		)
		if err := rows.Scan(&id, &ten, &due, &republish, &gen, &account, &state, &ord, &requeue, &inFlight, &room,
			&held, &more, &res.Now, &notBefore); err != nil {
			return err
		}
		if account < 1 || account > len(res.Accounts) {
			return fmt.Errorf("ledger: lease answered account %d of %d", account, len(res.Accounts))
		}
		switch {
		case !id.Valid:
			res.Counted = true
			res.Accounts[account-1] = AccountRoom{InFlight: int(inFlight.Int64), Room: int(room.Int64),
				Held: int(held.Int64), More: more.Bool}
		case state.String == string(StateLeased) || state.String == string(StateQueued):
			res.Rows = append(res.Rows, Leased{ID: id.Int64, Tenant: ten.String, DueAt: due.Time.UTC(),
				Republish: republish.Bool, QueueGeneration: int(gen.Int64), Account: account - 1, Requeue: requeue.Bool,
				Queued: state.String == string(StateQueued)})
			if notBefore.Valid {
				res.Rows[len(res.Rows)-1].NotBefore = notBefore.Time.UTC()
			}
		case state.String == string(StateFailed):
			res.SetAside = append(res.SetAside, id.Int64)
		}
		// Any other state is a row an intent settled as the lease took it
		// (a cancel recorded while a worker held it): nothing to publish.
		return nil
	})
	res.Now = res.Now.UTC()
	return res, err
}

// Survey is what a sweep run sees before it leases.
type Survey struct {
	// InFlight counts each account's rows a live lease holds (leased,
	// queued or sending, due by the horizon), in Sharing.Accounts' order.
	InFlight []int
	// Pending and Requeues say whether a pending row, and a row whose lease
	// ran out, is owed by the publish-ahead horizon.
	Pending, Requeues bool
	// OldestOwedAge is how long the oldest unsettled, already due row has
	// been owed; zero when nothing due is owed.
	OldestOwedAge time.Duration
}

// Survey reads, in one statement across every tenant, each account's work
// in flight (reading at most countUpTo rows), whether anything waits to be
// leased within ahead, and the oldest owed age (owed_sweep_survey_fair).
func (l *Sweep) Survey(ctx context.Context, ahead time.Duration, s Sharing, countUpTo int) (Survey, error) {
	if countUpTo <= 0 {
		return Survey{}, fmt.Errorf("ledger: survey count limit must be above zero, got %d", countUpTo)
	}
	var sv Survey
	var inFlight pq.Int64Array
	var oldest sql.NullFloat64
	var asked time.Time
	if err := l.queryRowAllTenants(ctx, qSurveyFair, surveyArgs(l.now(), ahead, s, countUpTo)...).
		Scan(&inFlight, &sv.Pending, &sv.Requeues, &oldest, &asked); err != nil {
		return Survey{}, err
	}
	for _, n := range inFlight {
		sv.InFlight = append(sv.InFlight, int(n))
	}
	if oldest.Valid && oldest.Float64 > 0 {
		sv.OldestOwedAge = secondsToDuration(min(oldest.Float64, math.MaxInt64/float64(time.Second)))
	}
	return sv, nil
}

// surveyArgs are qSurveyFair's arguments.
func surveyArgs(now any, ahead time.Duration, s Sharing, countUpTo int) []any {
	channels, accountOf, names, _ := s.args()
	return []any{now, seconds(ahead), seconds(s.liveFor()), pq.Array(channels), pq.Array(accountOf), pq.Array(names),
		countUpTo}
}

// Leasable reports whether a row is owed and free to lease within ahead,
// room allowing, of a tenant not paused on an account s does not hold:
// when a sweep leased nothing and held nothing back but this is true, the
// lease is broken (the silent zero), not idle.
func (l *Sweep) Leasable(ctx context.Context, ahead time.Duration, s Sharing) (bool, error) {
	var ok bool
	err := l.queryRowAllTenants(ctx, qLeasableFair, leasableArgs(l.now(), ahead, s)...).Scan(&ok)
	return ok, err
}

// leasableArgs are qLeasableFair's arguments.
func leasableArgs(now any, ahead time.Duration, s Sharing) []any {
	channels, accountOf, names, _ := s.args()
	return []any{now, seconds(ahead), pq.Array(channels), pq.Array(accountOf), pq.Array(names)}
}

// SendRates counts, per provider (the part of an account's name before
// ':'), the sends the workers finished in the window up to now, reading at
// most countUpTo attempts (owed_sweep_send_rates).
func (l *Sweep) SendRates(ctx context.Context, window time.Duration, countUpTo int) (map[string]int64, error) {
	if window <= 0 || countUpTo <= 0 {
		return nil, fmt.Errorf("ledger: send rates need a window and a count limit above zero, got %s and %d", window, countUpTo)
	}
	out := map[string]int64{}
	err := l.queryAllTenants(ctx, qSendRates, sendRatesArgs(l.now(), window, countUpTo), func(rows *sql.Rows) error {
		var provider string
		var n int64
		if err := rows.Scan(&provider, &n); err != nil {
			return err
		}
		out[provider] = n
		return nil
	})
	return out, err
}

// sendRatesArgs are qSendRates' arguments.
func sendRatesArgs(now any, window time.Duration, countUpTo int) []any {
	return []any{now, seconds(window), countUpTo}
}

// ExpireOverdue settles up to limit owed rows whose expires_at has passed as
// expired, across every tenant, and returns how many it settled.
func (l *Sweep) ExpireOverdue(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("ledger: expiry limit must be above zero, got %d", limit)
	}
	return l.execAllTenants(ctx, qExpireOverdue, l.now(), limit)
}

// MarkQueued records that the queue accepted the messages of rows ids. A
// queued row that stays unsettled for requeueAfter past its due time is
// leased and published again (OWED_REQUEUE_AFTER).
func (l *Sweep) MarkQueued(ctx context.Context, ids []int64, requeueAfter time.Duration) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return l.execAllTenants(ctx, qMarkQueued, pq.Array(ids), l.now(), seconds(requeueAfter))
}

// ReleaseLeased hands back rows a lease took (leased, or written queued:
// Leased.Queued) whose messages the queue did not accept, so the next sweep
// takes them without waiting for the lease.
func (l *Sweep) ReleaseLeased(ctx context.Context, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return l.execAllTenants(ctx, qReleaseLeased, pq.Array(ids), l.now())
}

// execAllTenants runs one of the sweeper's cross-tenant updates, a
// function that answers how many rows it changed.
func (l *core) execAllTenants(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := l.queryRowAllTenants(ctx, query, args...).Scan(&n)
	return n, err
}

// queryRowAllTenants runs one cross-tenant statement, a call of one of the
// SECURITY DEFINER functions of sql/sweep.sql, sql/operator.sql or
// sql/history.sql (see the
// package doc), as
// a prepared statement of its own transaction: no scope is entered, since
// the function's owner, not the caller's setting, is what sees every
// tenant.
func (l *core) queryRowAllTenants(ctx context.Context, query string, args ...any) scanner {
	s, err := l.prepared(ctx, query)
	if err != nil {
		return errScanner{err}
	}
	return s.QueryRowContext(ctx, args...)
}

// queryAllTenants is queryRowAllTenants for a function answering rows:
// scan reads each.
func (l *core) queryAllTenants(ctx context.Context, query string, args []any, scan func(*sql.Rows) error) error {
	s, err := l.prepared(ctx, query)
	if err != nil {
		return err
	}
	rows, err := s.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// queryAllTenantsTx is queryAllTenants in a transaction that commits only
// once every row of the answer was read. A statement that writes, such as
// the lease, commits on its own as soon as it has run; if the caller's
// context ends while its answer is on the way (a sweeper stopping), the
// driver drops the answer, and rows the statement leased would wait out
// their lease unpublished. In the transaction they are rolled back
// instead, and the next sweep takes them at once.
func (l *core) queryAllTenantsTx(ctx context.Context, query string, args []any, scan func(*sql.Rows) error) error {
	s, err := l.prepared(ctx, query)
	if err != nil {
		return err
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	rows, err := tx.StmtContext(ctx, s).QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := rows.Close(); err != nil {
		return err
	}
	return tx.Commit()
}

// ExplainLease runs the lease statement under EXPLAIN (ANALYZE, BUFFERS)
// (owed_sweep_explain_lease_fair runs the text owed_sweep_lease_fair runs) in a
// transaction it rolls back, so nothing is leased, and returns the plan
// and the server-side execution time. Operators and the benchmark use it to
// check that the lease reads the partial index and costs what is owed, not
// what the ledger holds.
func (l *Sweep) ExplainLease(ctx context.Context, p LeaseParams) (plan string, execution time.Duration, err error) {
	if err := p.validate(); err != nil {
		return "", 0, err
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return "", 0, err
	}
	defer tx.Rollback()
	var doc []byte
	if err := tx.QueryRowContext(ctx, qExplainLease, p.args(l.now())...).Scan(&doc); err != nil {
		return "", 0, err
	}
	var parsed []struct {
		ExecutionTime float64 `json:"Execution Time"`
	}
	if err := json.Unmarshal(doc, &parsed); err != nil || len(parsed) == 0 {
		return string(doc), 0, fmt.Errorf("ledger: read EXPLAIN output: %v", err)
	}
	return string(doc), time.Duration(parsed[0].ExecutionTime * float64(time.Millisecond)), nil
}
