package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lib/pq"
)

// Hold names one claim: the row and the claim token (its claim_seq) the
// claim took. Every claim that takes a row moves the row's claim_seq on,
// so a Hold stays the row's only until the next claim. Every write a worker
// makes after its claim names its Hold, and changes the row only while the
// Hold is still the row's and the row is still sending: the fence that keeps
// a worker whose lease ran out (it stalled, or lost the database for a
// while) from releasing, failing, skipping, expiring or extending a row that
// another worker has claimed since. Such a write changes nothing and
// returns ErrClaimLost.
type Hold struct {
	Tenant string
	ID     int64
	// Seq is the row's claim_seq as this claim left it (at least 1).
	Seq int64
}

// ErrClaimLost is returned by a write after a claim when the claim is no
// longer the row's: another claim took the row after this one's lease ran
// out, or the sweep took it back to publish it again, or it was settled
// meanwhile. The write changed nothing. The worker that gets it stops
// working on the row and leaves the message alone: it is not the worker's
// to ack, return or dead-letter any more (see internal/worker).
var ErrClaimLost = errors.New("ledger: the claim was superseded: the row is no longer held under it")

// ExtendClaims is the heartbeat of many held claims, possibly of many
// tenants, in one statement and one commit (see qExtendMany): each row's
// lease moves to leaseFor from the ledger's now, if the row is still
// sending under its Hold. It answers an error per hold, in input order: nil
// when the lease was extended, ErrClaimLost when the claim is no longer the
// row's, a *ValidationError for a hold the ledger can never take; the error
// return is for the batch as a whole.
func (l *Work) ExtendClaims(ctx context.Context, holds []Hold, leaseFor time.Duration) ([]error, error) {
	return l.extendClaims(ctx, holds, leaseFor, leaseFor, false)
}

// StartSends is the check right before the sends of many held claims (see
// ExtendClaims, which it is besides): each claim stops being revocable
// (ClaimParams.Revocable), so a cancel or reschedule from now on waits on
// the send as an intent, and claimed_at marks that the send may reach the
// provider. A row's lease is left as it is when at least keep of it is
// left by the ledger's now, and extended to leaseFor from then otherwise,
// so on success the caller holds at least keep from its request: the check
// right after a claim then changes no indexed column, and its update can be
// HOT (owed_extend_many). It answers ErrClaimLost for a claim that is no
// longer the row's, a revocable one a cancel or reschedule took back
// included: that row must not be sent. It is always a ledger statement,
// never an answer from memory, because the change that revokes a claim is
// another process's write.
func (l *Work) StartSends(ctx context.Context, holds []Hold, leaseFor, keep time.Duration) ([]error, error) {
	if keep <= 0 || keep > leaseFor {
		return nil, fmt.Errorf("ledger: the lease a send keeps must be above zero and at most the claim lease %s, got %s", leaseFor, keep)
	}
	return l.extendClaims(ctx, holds, leaseFor, keep, true)
}

func (l *Work) extendClaims(ctx context.Context, holds []Hold, leaseFor, keep time.Duration, start bool) ([]error, error) {
	if leaseFor <= 0 {
		return nil, fmt.Errorf("ledger: claim lease must be above zero, got %s", leaseFor)
	}
	errs := make([]error, len(holds))
	var in batchRows
	var seqs []int64
	for i, h := range holds {
		if errs[i] = ValidateTenant(h.Tenant); errs[i] == nil {
			in.add(i, h.Tenant, h.ID)
			seqs = append(seqs, h.Seq)
		}
	}
	if len(in.idx) == 0 {
		return errs, nil
	}
	res, err := l.queryMany(ctx, qExtendMany, in.idxArg(), pq.Array(in.tenant), pq.Array(in.id), pq.Array(seqs),
		start, l.now(), seconds(leaseFor), seconds(keep))
	if err != nil {
		return nil, err
	}
	defer res.Close()
	seen := 0
	for res.Next() {
		var idx int
		var held bool
		if err := res.Scan(&idx, &held); err != nil {
			return nil, err
		}
		if idx < 0 || idx >= len(holds) {
			return nil, fmt.Errorf("ledger: claim heartbeat answered unknown index %d", idx)
		}
		if !held {
			errs[idx] = ErrClaimLost
		}
		seen++
	}
	if err := res.Err(); err != nil {
		return nil, err
	}
	if seen != len(in.idx) {
		return nil, fmt.Errorf("ledger: claim heartbeat answered %d of %d claims", seen, len(in.idx))
	}
	return errs, nil
}

// heldWrite runs one fenced statement (see heldRow) in h's tenant scope,
// with the row, its token and the ledger's now as $1 to $3 and args after
// them, after recording the attempt a, if any, in the same transaction. A
// statement that matched nothing rolls the whole transaction back, the
// attempt included, and returns ErrClaimLost: a superseded claim writes
// nothing, and the row's send under the claim that superseded it is
// flagged a possible duplicate already (it took the row from a claim that
// never ended, see Claim.PossibleDuplicate).
func (l *Work) heldWrite(ctx context.Context, h Hold, a *Attempt, query string, args ...any) error {
	if a != nil && (a.StartedAt.IsZero() || a.FinishedAt.IsZero()) {
		return errAttemptTimes
	}
	return l.withTenant(ctx, h.Tenant, func(tx *txn) error {
		if a != nil {
			if err := recordAttempt(tx, h.ID, *a); err != nil {
				return err
			}
		}
		var id int64
		err := tx.QueryRow(query, append([]any{h.ID, h.Seq, l.now()}, args...)...).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrClaimLost
		}
		return err
	})
}

// SettleExpired settles a held row whose expiry passed before it could be
// sent (a worker that claimed it in time but waited past the expiry for the
// due second or the provider's pace).
func (l *Work) SettleExpired(ctx context.Context, h Hold) error {
	return l.heldWrite(ctx, h, nil, qSettleExpired)
}

// SettleExpiredAfter is SettleExpired recording the attempt a, if any, in
// the same transaction: a send failed and the row's next retry would land
// after its expiry, where a late retry would be a late nudge.
func (l *Work) SettleExpiredAfter(ctx context.Context, h Hold, a *Attempt) error {
	return l.heldWrite(ctx, h, a, qSettleExpired)
}

// SettleSkipped settles a held row the source says has nothing worth
// saying.
func (l *Work) SettleSkipped(ctx context.Context, h Hold, reason string) error {
	return l.heldWrite(ctx, h, nil, qSettleSkipped, reason)
}

// SettleFailed settles a held row as failed with reason (a permanent error
// or attempts exhausted). The attempt that failed, if any, is recorded with
// it. uncertain says the provider may have accepted the last send even so
// (as for ReleaseClaim): the row keeps the possible-duplicate mark, so the
// send after a Redrive is recorded as a possible duplicate. The mark is kept
// as well when a send of the row, this attempt included, was recorded as a
// possible duplicate.
func (l *Work) SettleFailed(ctx context.Context, h Hold, reason string, a *Attempt, uncertain bool) error {
	return l.heldWrite(ctx, h, a, qSettleFailed, reason, uncertain)
}

// ReleaseClaim gives back a held row the worker could not send now. Its
// message returns after retryAfter (the nack's delay); the row's lease is
// held until retryAfter plus requeueAfter from the ledger's now, so the
// sweeper does not publish it again meanwhile. A transient failure passes
// its attempt; a rate-limited send passes nil, because a 429 burns no
// attempt. uncertain says the provider may have accepted the send even so
// (it timed out, or the connection dropped without an answer): the next
// send of the row is then recorded as a possible duplicate.
func (l *Work) ReleaseClaim(ctx context.Context, h Hold, retryAfter, requeueAfter time.Duration,
	reason string, a *Attempt, uncertain bool) error {
	return l.heldWrite(ctx, h, a, qReleaseClaim,
		seconds(max(retryAfter, 0)+max(requeueAfter, 0)), nullString(reason), uncertain)
}

// HandBack hands a held row back to the ledger until notBefore from the
// ledger's now: a wait the queue should not hold a message through (a
// retry's step, a 429's Retry-After, a paused account or tenant). The row
// waits in the ledger, counted against no account's cap, and the sweep
// publishes it again to surface at its not-before (a new queue
// generation); the caller acks the message once HandBack returns nil. A
// transient failure passes its attempt, and uncertain marks the next send
// a possible duplicate, as for ReleaseClaim.
func (l *Work) HandBack(ctx context.Context, h Hold, notBefore time.Duration, reason string, a *Attempt,
	uncertain bool) error {
	return l.heldWrite(ctx, h, a, qHandBackClaim, seconds(max(notBefore, 0)), nullString(reason), uncertain)
}

// SettleDelivered is SettleDeliveredBatch for one row: it records the
// accepted send made under h and settles the row delivered with the
// provider's message id, in one transaction. It reports false when the row
// was already settled (a duplicate the provider accepted anyway; the attempt
// is still recorded, since it happened), and ErrClaimLost when another live
// claim holds the row.
func (l *Work) SettleDelivered(ctx context.Context, h Hold, a Attempt) (bool, error) {
	if a.StartedAt.IsZero() || a.FinishedAt.IsZero() {
		return false, errAttemptTimes
	}
	changed, errs, err := l.SettleDeliveredBatch(ctx, []Delivered{{Hold: h, Attempt: a}})
	if err != nil {
		return false, err
	}
	if errs != nil && errs[0] != nil {
		return false, errs[0]
	}
	return changed[0], nil
}

// Delivered is one accepted send to settle in a batch, made under Hold.
type Delivered struct {
	Hold    Hold
	Attempt Attempt
}

// ErrSetAside is a row a batch statement could not apply: it was set aside
// alone, settled failed (or cancelled, when a cancel waited on it) with the
// reason as its last_error, and the rest of the batch went on
// (owed_set_aside, internal/ledger/sql/claim.sql).
var ErrSetAside = errors.New("ledger: the row could not be applied and was set aside")

// SettleDeliveredBatch records many accepted sends and settles their rows
// delivered, possibly of many tenants, in one statement and one commit (see
// qSettleDeliveredMany); each attempt finishes at the ledger's now, when
// it is recorded. It reports, in input order, whether each row changed,
// and an error per row in errs (nil errs when there is none): ErrNotFound
// for a row not visible in its tenant's scope, a *ValidationError for a row
// the ledger can never take, ErrSetAside for a row the statement could not
// apply (set aside alone: no row fails the batch), and ErrClaimLost for a
// send whose claim was
// superseded by one that still holds the row: its attempt is recorded, as a
// possible duplicate, and the row is left to that claim, so the caller must
// not ack on its behalf. A superseded send whose row no live claim holds
// settles it as usual (the provider has it), its attempt flagged likewise.
func (l *Work) SettleDeliveredBatch(ctx context.Context, rows []Delivered) (changed []bool, errs []error, err error) {
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(rows))
		}
		errs[i] = err
	}
	var (
		in                batchRows
		seqs              []int64
		providers         []string
		started           []string
		messageIDs        []sql.NullString
		statuses          []sql.NullInt64
		possibleDuplicate []bool
	)
	for i, r := range rows {
		if err := ValidateTenant(r.Hold.Tenant); err != nil {
			fail(i, err)
			continue
		}
		if r.Attempt.StartedAt.IsZero() {
			fail(i, errAttemptTimes)
			continue
		}
		a := r.Attempt
		in.add(i, r.Hold.Tenant, r.Hold.ID)
		seqs = append(seqs, r.Hold.Seq)
		providers = append(providers, a.Provider)
		started = append(started, sqlTime(a.StartedAt))
		messageIDs = append(messageIDs, nullString(a.ProviderMessageID))
		statuses = append(statuses, sql.NullInt64{Int64: int64(a.HTTPStatus), Valid: a.HTTPStatus != 0})
		possibleDuplicate = append(possibleDuplicate, a.PossibleDuplicate)
	}
	changed = make([]bool, len(rows))
	if len(in.idx) == 0 {
		return changed, errs, nil
	}
	res, err := l.queryMany(ctx, qSettleDeliveredMany, in.idxArg(), pq.Array(in.tenant), pq.Array(in.id),
		pq.Array(seqs), pq.Array(providers), pq.Array(started), pq.Array(messageIDs), pq.Array(statuses),
		pq.Array(possibleDuplicate), l.now())
	if err != nil {
		return nil, nil, err
	}
	defer res.Close()
	seen := 0
	for res.Next() {
		var idx int
		var ch, elsewhere sql.NullBool
		var aside sql.NullString
		if err := res.Scan(&idx, &ch, &elsewhere, &aside); err != nil {
			return nil, nil, err
		}
		if idx < 0 || idx >= len(rows) {
			return nil, nil, fmt.Errorf("ledger: batch settle answered unknown index %d", idx)
		}
		switch {
		case aside.Valid:
			fail(idx, fmt.Errorf("%w: row %d: %s", ErrSetAside, rows[idx].Hold.ID, aside.String))
		case !ch.Valid:
			fail(idx, ErrNotFound)
		case elsewhere.Bool:
			fail(idx, ErrClaimLost)
		}
		changed[idx] = ch.Bool
		seen++
	}
	if err := res.Err(); err != nil {
		return nil, nil, err
	}
	if seen != len(in.idx) {
		return nil, nil, fmt.Errorf("ledger: batch settle answered %d of %d rows", seen, len(in.idx))
	}
	return changed, errs, nil
}
