package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lib/pq"
)

// ClaimOutcome tells the worker what to do with a message's row.
type ClaimOutcome int

const (
	// ClaimSend: the row is now the caller's (state sending); send it.
	ClaimSend ClaimOutcome = iota + 1
	// ClaimSettled: the row is already settled (failed included: only
	// Ledger.Redrive reopens a failed row); the message is a stray copy, so
	// ack it and send nothing.
	ClaimSettled
	// ClaimExpired: the row's expiry passed; it is now settled expired.
	ClaimExpired
	// ClaimHeld: another live worker is sending the row; leave the message.
	ClaimHeld
	// ClaimStale: the row was rescheduled since the message was published.
	ClaimStale
	// ClaimEarly: the row is not due yet; retry after Claim.Wait.
	ClaimEarly
)

func (o ClaimOutcome) String() string {
	switch o {
	case ClaimSend:
		return "send"
	case ClaimSettled:
		return "settled"
	case ClaimExpired:
		return "expired"
	case ClaimHeld:
		return "held"
	case ClaimStale:
		return "stale"
	case ClaimEarly:
		return "early"
	}
	return fmt.Sprintf("ClaimOutcome(%d)", int(o))
}

// Claim is the result of ClaimForSend.
type Claim struct {
	Outcome ClaimOutcome
	Row     Notification
	// Hold names this claim for every write after it (ClaimSend only): the
	// row and the claim token it took.
	Hold Hold
	// PossibleDuplicate is set when the row was claimed before and that
	// claim never finished (a worker died mid-send, or stalled until its
	// lease ran out): the provider may have accepted the first send.
	PossibleDuplicate bool
	// Now is the ledger's instant of the claim. What the claim says about
	// time is measured from it, by the ledger's clock: a worker that waits
	// for the due time, or checks an expiry, measures the durations from Now
	// (row.DueAt.Sub(c.Now)) on its own timer, never comparing the row's
	// times with its own clock, which may be skewed.
	Now time.Time
	// Wait is how long, by the ledger's clock, until the row is due
	// (ClaimEarly; ClaimSend, 0 when it is due already), or until the lease
	// of the live claim holding it runs out (ClaimHeld).
	Wait time.Duration
	// Undeliverable is the mark of the row's recipient on its channel in
	// its tenant (ClaimSend only; nil when it is not marked), read in the
	// claim's own statement: a worker that sends to the recipient itself
	// needs no look-up of its own (LookupUndeliverable). Only Provider,
	// Code, MarkedAt and the key are set.
	Undeliverable *Undeliverable
}

// ClaimParams shape the worker's claim.
type ClaimParams struct {
	// DueAt is the due time the message was published for; a row whose due
	// time differs was rescheduled and the message is stale.
	DueAt time.Time
	// LeaseFor is how long the claim holds the row against other workers,
	// from the ledger's now; the worker's heartbeat renews it (ExtendClaims).
	LeaseFor time.Duration
	// EarlyTolerance lets a message that arrives this much before the due
	// time be sent anyway (clocks differ a little between machines).
	EarlyTolerance time.Duration
	// Revocable makes each claim revocable until the caller starts its send
	// with StartSends: a Cancel or Reschedule that lands meanwhile takes the
	// row back from the claim at once (and answers it as changed, not in
	// flight), and StartSends then reports ErrClaimLost, so the row is never
	// sent. A caller that sets it must call StartSends right before every
	// send; the worker does.
	Revocable bool
}

// ClaimForSend is ClaimForSendBatch for one row: the claim on one row
// before a send, inside the tenant's scope. A row of another tenant is
// invisible and reported as ErrNotFound. Only ClaimSend changes the row to
// sending; ClaimExpired settles it expired.
func (l *Work) ClaimForSend(ctx context.Context, tenant string, id int64, p ClaimParams) (Claim, error) {
	claims, errs, err := l.ClaimForSendBatch(ctx, []ClaimRequest{{Tenant: tenant, ID: id, DueAt: p.DueAt}}, p)
	if err != nil {
		return Claim{}, err
	}
	return claims[0], errs[0]
}

// decide says why a claim statement took the row or did not, from the row
// as it was before the statement; an expired row that no live claim holds
// is settled expired here.
func (l *Work) decide(ctx context.Context, row Notification, took bool, due, now time.Time,
	p ClaimParams) (Claim, error) {
	c := Claim{Row: row, Now: now}
	var err error
	// The statement took the row exactly when none of the cases below
	// holds; the order here says which reason applies first. A row held by
	// a live claim is that claim's to settle, even when it has expired
	// meanwhile: its worker checks the expiry before it sends.
	switch {
	case row.State.Settled():
		c.Outcome = ClaimSettled
	case !row.DueAt.Equal(due):
		c.Outcome = ClaimStale
	case row.State == StateSending && row.LeaseUntil != nil && row.LeaseUntil.After(now):
		c.Outcome = ClaimHeld
		c.Wait = row.LeaseUntil.Sub(now)
	case row.ExpiresAt != nil && !row.ExpiresAt.After(now):
		c.Outcome = ClaimExpired
		// Settled at the instant the claim judged it expired.
		err = l.withTenant(ctx, row.Tenant, func(tx *txn) error {
			_, err := tx.Exec(qExpireUnclaimed, row.ID, now)
			return err
		})
	case row.DueAt.After(now.Add(p.EarlyTolerance)):
		c.Outcome = ClaimEarly
		c.Wait = row.DueAt.Sub(now)
	default:
		c.Outcome = ClaimSend
		c.Wait = max(row.DueAt.Sub(now), 0)
		// A claimed_at left behind means the last claim neither settled nor
		// released the row: its worker died or lost its lease, maybe after
		// the provider took the message (or an uncertain release or a
		// Redrive kept the mark).
		c.PossibleDuplicate = row.ClaimedAt != nil
		c.Row.State = StateSending
		if !p.Revocable {
			// A revocable claim leaves claimed_at to StartSends.
			c.Row.ClaimedAt = &now
		}
		// The statement returned the row's new claim_seq: this claim's token.
		c.Hold = Hold{Tenant: row.Tenant, ID: row.ID, Seq: row.ClaimSeq}
	}
	if took != (c.Outcome == ClaimSend) {
		return c, fmt.Errorf("ledger: claim of row %d disagrees with its reading (took=%v, outcome %s)", row.ID, took, c.Outcome)
	}
	return c, err
}

// ClaimRequest names one row a queue message points at.
type ClaimRequest struct {
	Tenant string
	ID     int64
	DueAt  time.Time
}

// ClaimForSendBatch is the worker's claim on many rows, possibly of many
// tenants, before their sends: one statement and one commit, each row in its
// own tenant's scope (see qClaimMany); p.DueAt is ignored in favour of each
// request's. It returns a Claim or an error per request, in input order:
// ErrNotFound for a row not visible in its tenant's scope, a
// *ValidationError naming the field for a request the ledger can never
// take (a tenant id tenant.Validate refuses, a due time outside what the
// ledger holds). Such a request is left out of the statement, so it costs
// the rest of the batch nothing; the error return is for the batch as a
// whole (the ledger could not be reached).
func (l *Work) ClaimForSendBatch(ctx context.Context, reqs []ClaimRequest, p ClaimParams) ([]Claim, []error, error) {
	if p.LeaseFor <= 0 {
		return nil, nil, fmt.Errorf("ledger: claim lease must be above zero, got %s", p.LeaseFor)
	}
	claims := make([]Claim, len(reqs))
	errs := make([]error, len(reqs))
	due := make([]time.Time, len(reqs))
	var in batchRows
	var dues []string
	for i, r := range reqs {
		if errs[i] = checkClaim(r); errs[i] != nil {
			continue
		}
		due[i] = r.DueAt.UTC().Truncate(time.Microsecond)
		in.add(i, r.Tenant, r.ID)
		dues = append(dues, sqlTime(due[i]))
	}
	if len(in.idx) == 0 {
		return claims, errs, nil
	}
	res, err := l.queryMany(ctx, qClaimMany, in.idxArg(), pq.Array(in.tenant), pq.Array(in.id), pq.Array(dues),
		p.Revocable, l.now(), seconds(p.LeaseFor), seconds(p.EarlyTolerance))
	if err != nil {
		return nil, nil, err
	}
	type answer struct {
		row  Notification
		took bool
		now  time.Time
		mark *Undeliverable
	}
	answers := make(map[int]answer, len(reqs))
	for res.Next() {
		var (
			idx          int
			a            answer
			mProv, mCode sql.NullString
			mAt          sql.NullTime
		)
		if a.row, err = scanNotification(prefixed{res, &idx}, &a.took, &mProv, &mCode, &mAt, &a.now); err != nil {
			res.Close()
			return nil, nil, err
		}
		a.now = a.now.UTC()
		if mAt.Valid {
			a.mark = &Undeliverable{Tenant: a.row.Tenant, Channel: a.row.Channel, Address: a.row.Recipient,
				Provider: mProv.String, Code: mCode.String, MarkedAt: mAt.Time.UTC()}
		}
		answers[idx] = a
	}
	res.Close()
	if err := res.Err(); err != nil {
		return nil, nil, err
	}
	for _, i := range in.idx {
		a, ok := answers[int(i)]
		if !ok {
			errs[i] = ErrNotFound
			continue
		}
		claims[i], errs[i] = l.decide(ctx, a.row, a.took, due[i], a.now, p)
		if claims[i].Outcome == ClaimSend {
			claims[i].Undeliverable = a.mark
		}
	}
	return claims, errs, nil
}

// checkClaim refuses, naming the field, a claim request the ledger can
// never take: its tenant id breaks tenant.Validate's rules, or its due time
// lies outside the years 1 to 9999, which is all a timestamptz written as
// JSON can hold (a queue message's due time with a large offset can fall
// outside it once in UTC). Such a request would otherwise fail the whole
// batch statement it shares with healthy ones.
func checkClaim(r ClaimRequest) error {
	v := &ValidationError{}
	checkTenant(v, r.Tenant)
	if y := r.DueAt.UTC().Year(); y < 1 || y > 9999 {
		v.add(-1, "due_at", "%s is outside the years 1 to 9999", r.DueAt.UTC().Format(time.RFC3339))
	}
	return v.orNil()
}

// batchRows are the columns every row of a worker's batch statement
// names, one array each (ClaimMany, ExtendMany, SettleDeliveredMany): its
// place in the caller's slice, which comes back with its answer, its
// tenant and its id.
type batchRows struct {
	idx    []int64
	tenant []string
	id     []int64
}

func (b *batchRows) add(idx int, tenant string, id int64) {
	b.idx = append(b.idx, int64(idx))
	b.tenant = append(b.tenant, tenant)
	b.id = append(b.id, id)
}

func (b *batchRows) idxArg() any { return pq.Array(b.idx) }

// sqlTime writes t for a timestamptz[] parameter: RFC 3339 with
// microseconds, which is what the column holds.
func sqlTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.999999Z07:00") }

// queryMany runs one of the worker's batch statements, its rows passed as
// arrays (batchRows and the columns after them). It needs no transaction:
// the SQL functions set the scope of the batch's tenants themselves.
func (l *Work) queryMany(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	s, err := l.prepared(ctx, query)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(ctx, args...)
}

// prefixed scans one leading column into first, then the rest as asked.
type prefixed struct {
	s     scanner
	first any
}

func (p prefixed) Scan(dest ...any) error { return p.s.Scan(append([]any{p.first}, dest...)...) }

// AttemptOutcome is how one send ended.
type AttemptOutcome string

// Outcomes of a send. A provider 429 is not an attempt: it burns nothing.
const (
	AttemptAccepted  AttemptOutcome = "accepted"
	AttemptSkipped   AttemptOutcome = "skipped"
	AttemptTransient AttemptOutcome = "transient"
	AttemptPermanent AttemptOutcome = "permanent"
)

// Attempt is one send tried.
type Attempt struct {
	Attempt           int            `json:"attempt"`
	Provider          string         `json:"provider"`
	StartedAt         time.Time      `json:"started_at"`
	FinishedAt        time.Time      `json:"finished_at"`
	Outcome           AttemptOutcome `json:"outcome"`
	ProviderMessageID string         `json:"provider_message_id,omitempty"`
	HTTPStatus        int            `json:"http_status,omitempty"`
	Error             string         `json:"error,omitempty"`
	PossibleDuplicate bool           `json:"possible_duplicate,omitempty"`
}

var errAttemptTimes = errors.New("ledger: an attempt needs its start and finish times")

func recordAttempt(tx *txn, id int64, a Attempt) error {
	if a.StartedAt.IsZero() || a.FinishedAt.IsZero() {
		return errAttemptTimes
	}
	var n int
	err := tx.QueryRow(qRecordAttempt, id, a.Provider, a.StartedAt.UTC(), a.FinishedAt.UTC(),
		string(a.Outcome), nullString(a.ProviderMessageID), sql.NullInt64{Int64: int64(a.HTTPStatus), Valid: a.HTTPStatus != 0},
		nullString(a.Error), a.PossibleDuplicate).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}
