package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
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
	// PossibleDuplicate is set when the row was claimed before and that
	// claim never finished (a worker died mid-send): the provider may have
	// accepted the first send.
	PossibleDuplicate bool
	// Wait is how long until the row is due (ClaimEarly).
	Wait time.Duration
}

// ClaimParams shape the worker's claim.
type ClaimParams struct {
	// DueAt is the due time the message was published for; a row whose due
	// time differs was rescheduled and the message is stale.
	DueAt time.Time
	// LeaseFor is how long the claim holds the row against other workers.
	LeaseFor time.Duration
	// EarlyTolerance lets a message that arrives this much before the due
	// time be sent anyway (clocks differ a little between machines).
	EarlyTolerance time.Duration
}

// ClaimForSend is ClaimForSendBatch for one row: the claim on one row
// before a send, inside the tenant's scope. A row of another tenant is
// invisible and reported as ErrNotFound. Only ClaimSend changes the row to
// sending; ClaimExpired settles it expired.
func (l *Ledger) ClaimForSend(ctx context.Context, tenant string, id int64, p ClaimParams) (Claim, error) {
	claims, errs, err := l.ClaimForSendBatch(ctx, []ClaimRequest{{Tenant: tenant, ID: id, DueAt: p.DueAt}}, p)
	if err != nil {
		return Claim{}, err
	}
	return claims[0], errs[0]
}

// decide says why a claim statement took the row or did not, from the row
// as it was before the statement; an expired row is settled expired here.
func (l *Ledger) decide(ctx context.Context, row Notification, took bool, due, now time.Time,
	early time.Duration) (Claim, error) {
	c := Claim{Row: row}
	var err error
	// The statement took the row exactly when none of the cases below
	// holds; the order here says which reason applies first.
	switch {
	case row.State.Settled():
		c.Outcome = ClaimSettled
	case !row.DueAt.Equal(due):
		c.Outcome = ClaimStale
	case row.ExpiresAt != nil && !row.ExpiresAt.After(now):
		c.Outcome = ClaimExpired
		// Settled at the instant the claim judged it expired.
		err = l.withTenant(ctx, row.Tenant, func(tx *txn) error {
			_, err := tx.Exec(qSettleExpired, row.ID, now)
			return err
		})
	case row.State == StateSending && row.LeaseUntil != nil && row.LeaseUntil.After(now):
		c.Outcome = ClaimHeld
	case row.DueAt.After(now.Add(early)):
		c.Outcome = ClaimEarly
		c.Wait = row.DueAt.Sub(now)
	default:
		c.Outcome = ClaimSend
		// A claimed_at left behind means the last claim neither settled nor
		// released the row: its worker died, maybe after the provider took
		// the message (or an uncertain release or a Redrive kept the mark).
		c.PossibleDuplicate = row.ClaimedAt != nil
		c.Row.State, c.Row.ClaimedAt = StateSending, &now
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

type claimJSON struct {
	Idx    int       `json:"idx"`
	Tenant string    `json:"tenant_id"`
	ID     int64     `json:"id"`
	DueAt  time.Time `json:"due_at"`
}

// ClaimForSendBatch is the worker's claim on many rows, possibly of many
// tenants, before their sends: one statement and one commit, each row in its
// own tenant's scope (see qClaimBatch); p.DueAt is ignored in favour of each
// request's. It returns a Claim or an error (ErrNotFound for a row not
// visible in its tenant's scope) per request, in input order; the error
// return is for the batch as a whole.
func (l *Ledger) ClaimForSendBatch(ctx context.Context, reqs []ClaimRequest, p ClaimParams) ([]Claim, []error, error) {
	if p.LeaseFor <= 0 {
		return nil, nil, fmt.Errorf("ledger: claim lease must be above zero, got %s", p.LeaseFor)
	}
	in := make([]claimJSON, len(reqs))
	for i, r := range reqs {
		if err := ValidateTenant(r.Tenant); err != nil {
			return nil, nil, err
		}
		in[i] = claimJSON{Idx: i, Tenant: r.Tenant, ID: r.ID, DueAt: r.DueAt.UTC().Truncate(time.Microsecond)}
	}
	res, err := l.queryBatch(ctx, qClaimBatch, in, l.now(), seconds(p.LeaseFor), seconds(p.EarlyTolerance))
	if err != nil {
		return nil, nil, err
	}
	type answer struct {
		row  Notification
		took bool
		now  time.Time
	}
	answers := make(map[int]answer, len(reqs))
	for res.Next() {
		var idx int
		var a answer
		if a.row, err = scanNotification(prefixed{res, &idx}, &a.took, &a.now); err != nil {
			res.Close()
			return nil, nil, err
		}
		a.now = a.now.UTC()
		answers[idx] = a
	}
	res.Close()
	if err := res.Err(); err != nil {
		return nil, nil, err
	}
	claims := make([]Claim, len(reqs))
	errs := make([]error, len(reqs))
	for i := range reqs {
		a, ok := answers[i]
		if !ok {
			errs[i] = ErrNotFound
			continue
		}
		claims[i], errs[i] = l.decide(ctx, a.row, a.took, in[i].DueAt, a.now, p.EarlyTolerance)
	}
	return claims, errs, nil
}

// queryBatch runs one of the worker's batch statements with batch as its
// JSON $1 and args after it. It needs no transaction: the SQL functions
// scope each row to its tenant themselves.
func (l *Ledger) queryBatch(ctx context.Context, query string, batch any, args ...any) (*sql.Rows, error) {
	doc, err := json.Marshal(batch)
	if err != nil {
		return nil, err
	}
	s, err := l.prepared(ctx, query)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(ctx, append([]any{string(doc)}, args...)...)
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

// SettleDelivered is SettleDeliveredBatch for one row: it records the
// accepted send and settles the row delivered with the provider's message
// id, in one transaction. It reports false when the row was already
// delivered (a duplicate the provider accepted anyway; the attempt is still
// recorded, since it happened).
func (l *Ledger) SettleDelivered(ctx context.Context, tenant string, id int64, a Attempt) (bool, error) {
	if a.StartedAt.IsZero() || a.FinishedAt.IsZero() {
		return false, errAttemptTimes
	}
	changed, errs, err := l.SettleDeliveredBatch(ctx, []Delivered{{Tenant: tenant, ID: id, Attempt: a}})
	if err != nil {
		return false, err
	}
	if errs != nil && errs[0] != nil {
		return false, errs[0]
	}
	return changed[0], nil
}

// Delivered is one accepted send to settle in a batch.
type Delivered struct {
	Tenant  string
	ID      int64
	Attempt Attempt
}

type deliveredJSON struct {
	Idx               int       `json:"idx"`
	Tenant            string    `json:"tenant_id"`
	ID                int64     `json:"id"`
	Provider          string    `json:"provider"`
	StartedAt         time.Time `json:"started_at"`
	MessageID         *string   `json:"message_id"`
	HTTPStatus        *int      `json:"http_status"`
	PossibleDuplicate bool      `json:"possible_duplicate"`
}

// SettleDeliveredBatch records many accepted sends and settles their rows
// delivered, possibly of many tenants, in one statement and one commit (see
// qSettleDeliveredBatch); each attempt finishes at the ledger's now, when
// it is recorded. It reports, in input order,
// whether each row changed; a row not visible in its tenant's scope is
// reported as ErrNotFound in errs (nil errs when every row was found).
func (l *Ledger) SettleDeliveredBatch(ctx context.Context, rows []Delivered) (changed []bool, errs []error, err error) {
	in := make([]deliveredJSON, len(rows))
	for i, r := range rows {
		if err := ValidateTenant(r.Tenant); err != nil {
			return nil, nil, err
		}
		if r.Attempt.StartedAt.IsZero() {
			return nil, nil, errors.New("ledger: an attempt needs its start time")
		}
		in[i] = deliveredJSON{Idx: i, Tenant: r.Tenant, ID: r.ID, Provider: r.Attempt.Provider,
			StartedAt: r.Attempt.StartedAt.UTC(), PossibleDuplicate: r.Attempt.PossibleDuplicate}
		if m := r.Attempt.ProviderMessageID; m != "" {
			in[i].MessageID = &m
		}
		if st := r.Attempt.HTTPStatus; st != 0 {
			in[i].HTTPStatus = &st
		}
	}
	res, err := l.queryBatch(ctx, qSettleDeliveredBatch, in, l.now())
	if err != nil {
		return nil, nil, err
	}
	defer res.Close()
	changed = make([]bool, len(rows))
	seen := 0
	for res.Next() {
		var idx int
		var ch sql.NullBool
		if err := res.Scan(&idx, &ch); err != nil {
			return nil, nil, err
		}
		if idx < 0 || idx >= len(rows) {
			return nil, nil, fmt.Errorf("ledger: batch settle answered unknown index %d", idx)
		}
		if !ch.Valid {
			if errs == nil {
				errs = make([]error, len(rows))
			}
			errs[idx] = ErrNotFound
		}
		changed[idx] = ch.Bool
		seen++
	}
	if err := res.Err(); err != nil {
		return nil, nil, err
	}
	if seen != len(rows) {
		return nil, nil, fmt.Errorf("ledger: batch settle answered %d of %d rows", seen, len(rows))
	}
	return changed, errs, nil
}

// SettleExpired settles a row whose expiry passed before it could be sent
// (a worker that claimed it in time but waited past the expiry for the due
// second or the provider's pace). A row already settled is left alone.
func (l *Ledger) SettleExpired(ctx context.Context, tenant string, id int64) error {
	return l.withTenant(ctx, tenant, func(tx *txn) error {
		_, err := tx.Exec(qSettleExpired, id, l.now())
		return err
	})
}

// SettleSkipped settles a row the source says has nothing worth saying.
func (l *Ledger) SettleSkipped(ctx context.Context, tenant string, id int64, reason string) error {
	return l.withTenant(ctx, tenant, func(tx *txn) error {
		_, err := tx.Exec(qSettleSkipped, id, l.now(), reason)
		return err
	})
}

// SettleFailed settles a row as failed with reason (a permanent error or
// attempts exhausted). The attempt that failed, if any, is recorded with it.
// uncertain says the provider may have accepted the last send even so (as
// for ReleaseClaim): the row keeps the possible-duplicate mark, so the send
// after a Redrive is recorded as a possible duplicate. The mark is kept as
// well when a send of the row was already recorded as one.
func (l *Ledger) SettleFailed(ctx context.Context, tenant string, id int64, reason string, a *Attempt, uncertain bool) error {
	return l.withTenant(ctx, tenant, func(tx *txn) error {
		if a != nil {
			if err := recordAttempt(tx, id, *a); err != nil {
				return err
			}
		}
		_, err := tx.Exec(qSettleFailed, id, l.now(), reason, uncertain)
		return err
	})
}

// ReleaseClaim gives back a row the worker could not send now. Its message
// returns at retryAt (the nack's delay); the row's lease is held until
// retryAt plus requeueAfter so the sweeper does not publish it again
// meanwhile. A transient failure passes its attempt; a rate-limited send
// passes nil, because a 429 burns no attempt. uncertain says the provider
// may have accepted the send even so (it timed out, or the connection
// dropped without an answer): the next send of the row is then recorded as
// a possible duplicate.
func (l *Ledger) ReleaseClaim(ctx context.Context, tenant string, id int64, retryAt time.Time,
	requeueAfter time.Duration, reason string, a *Attempt, uncertain bool) error {
	return l.withTenant(ctx, tenant, func(tx *txn) error {
		if a != nil {
			if err := recordAttempt(tx, id, *a); err != nil {
				return err
			}
		}
		_, err := tx.Exec(qReleaseClaim, id, retryAt.UTC().Add(requeueAfter), nullString(reason), l.now(), uncertain)
		return err
	})
}
