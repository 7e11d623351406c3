package ledger

// Every statement the ledger runs, named for what it does.
//
// "Now" is always written coalesce($n::timestamptz, now()) with the Ledger
// clock's NowOrNil as $n: nil in production, so the database's clock decides
// (now() is the transaction's start, so every statement of one transaction
// agrees on the instant), or a test's stubbed instant. A time derived from
// now (a lease's end, a publish-ahead horizon) is computed here from that
// same expression and a duration in seconds, never in Go from another clock.

const (
	// notificationColumns are a row's columns as the ledger reads them back:
	// the payload is the row's own or, for a row of an event, the shared one
	// (migrations/00017). Selected FROM owed_notifications, unaliased.
	notificationColumns = `id, tenant_id, recipient, channel, kind, ref_id, due_at, expires_at,
		coalesce(payload, (SELECT p.payload FROM owed_event_payloads p
		                    WHERE p.tenant_id = owed_notifications.tenant_id AND p.id = owed_notifications.payload_id)),
		state, attempts, lease_until, claimed_at, published_at, delivered_at, settled_at,
		provider, provider_message_id, last_error, created_at, updated_at, queue_generation, claim_seq`

	// qSchedule inserts a batch idempotently. The batch travels as one JSON
	// array so a thousand rows cost one round trip. Rows already there are
	// found by the schedule key in the final select.
	qSchedule = `
WITH input AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(
        idx int, recipient text, channel text, kind text, ref_id text,
        due_at timestamptz, expires_at timestamptz, payload jsonb, payload_id bigint)
), ins AS (
    INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at,
                               payload, payload_id, created_at, updated_at)
    SELECT $2, recipient, channel, kind, ref_id, due_at, expires_at, payload, payload_id,
           coalesce($3::timestamptz, now()), coalesce($3::timestamptz, now())
      FROM input ORDER BY idx
    ON CONFLICT ON CONSTRAINT owed_notifications_schedule_key DO NOTHING
    RETURNING id, recipient, kind, ref_id, due_at
)
SELECT i.idx, coalesce(ins.id, n.id), ins.id IS NOT NULL, coalesce(n.state, 'pending')
  FROM input i
  LEFT JOIN ins ON (ins.recipient, ins.kind, ins.ref_id, ins.due_at) = (i.recipient, i.kind, i.ref_id, i.due_at)
  LEFT JOIN owed_notifications n ON n.tenant_id = $2
       AND (n.recipient, n.kind, n.ref_id, n.due_at) = (i.recipient, i.kind, i.ref_id, i.due_at)
 ORDER BY i.idx`

	// qFindScheduled looks up rows a concurrent scheduler inserted after
	// qSchedule's snapshot was taken (ON CONFLICT saw them, the join did not).
	qFindScheduled = `
SELECT id, state FROM owed_notifications
 WHERE tenant_id = $1 AND recipient = $2 AND kind = $3 AND ref_id = $4 AND due_at = $5`

	// subjectOpenRows picks the open rows of one subject ($1 tenant, $2
	// kind, $3 ref_id; $4 is now) for qCancel and qReschedule. A row a
	// worker is sending right now is left alone here: its outcome is the
	// truth, and the cancel or reschedule is recorded on it as an intent
	// instead (qRecordCancel, qRecordReschedule in schedule.go), applied
	// when the send ends (migrations/00013).
	//
	// The rows are locked in id order first, as every multi-row update a
	// worker may race is (see qMarkQueued).
	subjectOpenRows = `
  FROM (SELECT id FROM owed_notifications
         WHERE tenant_id = $1 AND kind = $2 AND ref_id = $3 AND settled_at IS NULL
         ORDER BY id FOR UPDATE) l
 WHERE n.id = l.id
   AND n.settled_at IS NULL
   AND (n.state <> 'sending' OR n.lease_until <= coalesce($4::timestamptz, now()))`

	// qCancel settles the open rows of one subject.
	qCancel = `
UPDATE owed_notifications n
   SET state = 'cancelled', settled_at = coalesce($4::timestamptz, now()), lease_until = NULL,
       updated_at = coalesce($4::timestamptz, now()), last_error = 'cancelled'` + subjectOpenRows

	// qCountInFlight counts rows of one subject that are being sent now.
	qCountInFlight = `
SELECT count(*) FROM owed_notifications
 WHERE tenant_id = $1 AND kind = $2 AND ref_id = $3
   AND state = 'sending' AND lease_until > coalesce($4::timestamptz, now())`

	// qReschedule moves the open rows of one subject to a new due time ($5),
	// shifting an expiry by the same amount so the window a nudge is worth
	// sending in keeps its length. The new due_at gives the row a new
	// idempotency key; a message already published under the old one is
	// recognised as stale by the worker. published_at is cleared because the
	// new key was never published. The queue generation moves on too: a
	// snooze and un-snooze back to a due time already published must not
	// reuse that message's queue key, or a queue that deduplicates would
	// drop the new message as a copy of the old one, which the worker
	// acked as stale.
	qReschedule = `
UPDATE owed_notifications n
   SET due_at = $5, expires_at = ` + shiftedExpiry + `,
       state = 'pending', lease_until = NULL, claimed_at = NULL, published_at = NULL,
       queue_generation = n.queue_generation + 1,
       updated_at = coalesce($4::timestamptz, now())` + subjectOpenRows

	// The sweeper's statements below cross tenants, so each is a SECURITY
	// DEFINER function owned by owed_definer (migrations/00019), the only
	// way the runtime role reaches another tenant's rows, and returns only
	// the columns read here. The comments say what each function's SQL does.
	//
	// qLeaseFair is the sweeper's claim of owed rows, one slice in one
	// statement (owed_sweep_lease_fair, whose text is
	// owed_sweep_fair_lease_sql: sweep.sql explains how it shares the
	// slice between accounts and tenants and which indexes it reads). There
	// is no lower bound on due_at: after a pause, the oldest owed rows go
	// first. Its parameters are LeaseParams.args. It answers the rows in
	// the slice's order, then one row per account, each with the database's
	// now.
	//
	// A row published before (queued or sending with its lease run out: its
	// message was lost, acked or dead-lettered, or its worker died) is
	// republished deliberately, so its queue generation moves on and the new
	// message gets a new queue key. A row still leased and never marked
	// published (the sweep died between the publish and the mark) keeps its
	// generation: its message is probably in the queue already, and the
	// same key lets a deduplicating queue absorb the repeat.
	//
	// qExplainLease runs the same text under EXPLAIN ANALYZE.
	qLeaseFair = `SELECT id, tenant_id, due_at, republish, queue_generation, account, state, ord, requeue, outstanding,
       room, held, more, asked_at
  FROM owed_sweep_lease_fair($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`
	qExplainLease = `SELECT owed_sweep_explain_lease_fair($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`

	// qExpireOverdue settles rows whose expiry passed before they were sent
	// (owed_sweep_expire, $1 now, $2 the limit) and counts them. A row a
	// live worker is sending is skipped: that worker checked the expiry when
	// it claimed the row.
	qExpireOverdue = `SELECT owed_sweep_expire($1, $2)`

	// qMarkQueued records that the queue accepted the messages of rows $1
	// (owed_sweep_mark_queued). Only rows still leased change: a worker may
	// already have claimed (or even delivered) a row whose message it
	// received before this statement ran. The lease runs from the due time
	// ($3 seconds past it), since a message published ahead is invisible
	// until then.
	//
	// Every statement that updates several rows that workers may be
	// claiming at the same moment locks them first, in id order, as the
	// workers' batched claims and settles do (migrations/00008): two
	// transactions that lock overlapping rows in the same order wait for
	// each other instead of deadlocking. This one and qReleaseLeased do.
	qMarkQueued = `SELECT owed_sweep_mark_queued($1, $2, $3)`

	// qReleaseLeased hands back the rows of $1 that are still leased, whose
	// messages were not accepted, so the next sweep takes them at once
	// (owed_sweep_release).
	qReleaseLeased = `SELECT owed_sweep_release($1, $2)`

	// heldRow fences every write a worker makes after its claim: the row
	// ($1) changes only while it is still sending under the claim token its
	// worker holds ($2, claim_seq: see migrations/00012_claim_fence.sql). A
	// row another claim has taken since, or the sweep re-leased after the
	// lease ran out, matches nothing, and the empty RETURNING tells the
	// caller so (ErrClaimLost). $3 is now in each of them.
	heldRow = `
 WHERE id = $1 AND claim_seq = $2 AND state = 'sending'
RETURNING id`

	// qExpireUnclaimed settles expired a row a claim found past its expiry
	// and did not take ($2 is the claim's instant). A row a live worker is
	// sending is left alone, as qExpireOverdue leaves it: the claim answers
	// ClaimHeld for it, and only its holder settles it.
	qExpireUnclaimed = `
UPDATE owed_notifications
   SET state = 'expired', settled_at = $2, lease_until = NULL, updated_at = $2,
       last_error = 'expired before it was sent'
 WHERE id = $1 AND settled_at IS NULL AND (state <> 'sending' OR lease_until <= $2)`

	// qSettleExpired settles a held row whose expiry passed after its claim.
	qSettleExpired = `
UPDATE owed_notifications
   SET state = 'expired', settled_at = coalesce($3::timestamptz, now()), lease_until = NULL,
       updated_at = coalesce($3::timestamptz, now()), last_error = 'expired before it was sent'` + heldRow

	// qClaimBatch is the worker's claim of many rows, possibly of many
	// tenants, in one statement and one commit: owed_claim_batch
	// (migrations/00008) runs owed_claim (migrations/00007) for each row in
	// id order under the row's own tenant scope. For each row owed_claim
	// locks it and takes it for one send only if it is owed, due (within the
	// early tolerance, $4 seconds), for the due time the message names,
	// unexpired and not held by a live worker; it returns the row as it was
	// plus whether it was taken, and the caller reads the old row to say why
	// a claim took nothing. A settled row is never taken, failed included
	// (owed_claim as migrations/00011 left it): only Redrive reopens a failed
	// row, so a stray or redriven copy of its message sends nothing. A row
	// not visible in its tenant's scope answers nothing for its idx.
	//
	// A claim that takes the row moves its claim_seq on, and the row comes
	// back with the new value: the token of this claim, which every later
	// write names (heldRow; owed_claim as migrations/00012 left it).
	//
	// The claim's instant comes back as the last column, so the caller
	// judges the rows by the instant that took them, and the lease ($3
	// seconds) runs from it.
	qClaimBatch = `
SELECT c.*, t.now
  FROM (SELECT coalesce($2::timestamptz, now()) AS now) t,
       owed_claim_batch($1::jsonb, t.now, t.now + make_interval(secs => $3),
                        t.now + make_interval(secs => $4)) c`

	// qSettleDeliveredBatch records accepted sends and settles their rows
	// in one statement and one commit: owed_settle_delivered_batch runs
	// owed_settle_delivered (both as migrations/00012 left them) for each
	// row in id order under the row's own tenant scope. delivered_at is
	// stamped only on a row not delivered yet, so a row has one delivered_at
	// however many copies of its message arrive; the attempt is recorded
	// either way, because it happened. A row failed while its send was still
	// under way (its claim's lease ran out and another worker failed it) is
	// stamped delivered all the same: the provider's yes is the truth.
	//
	// Each send names its claim's token. A send made under a claim that
	// another has superseded is recorded as a possible duplicate; when that
	// other claim still holds the row under a live lease (its send may be
	// under way) the row is left to it (held_elsewhere) rather than settled
	// from under it. A row not visible in its tenant's scope answers a NULL
	// changed.
	qSettleDeliveredBatch = `
SELECT idx, changed, held_elsewhere FROM owed_settle_delivered_batch($1::jsonb, coalesce($2::timestamptz, now()))`

	// qExtendClaims is the heartbeat of many held claims, possibly of many
	// tenants, in one statement and one commit: owed_extend_claims
	// (migrations/00012) moves each row's lease to $3 seconds from now, if
	// the row is still sending under the token named, in its tenant's scope,
	// and says whether it was.
	qExtendClaims = `
SELECT idx, held FROM owed_extend_claims($1::jsonb, coalesce($2::timestamptz, now()),
                                         coalesce($2::timestamptz, now()) + make_interval(secs => $3))`

	// qSettleSkipped settles a held row whose recipient has nothing to
	// receive.
	qSettleSkipped = `
UPDATE owed_notifications
   SET state = 'skipped', settled_at = coalesce($3::timestamptz, now()), lease_until = NULL, last_error = $4,
       updated_at = coalesce($3::timestamptz, now())` + heldRow

	// qSettleFailed settles a held row failed. claimed_at, the mark that the
	// next send may duplicate an earlier one (see qRedrive), survives only
	// when the last send's outcome was unknown ($5) or a send of the row
	// (the one just recorded included) was recorded as a possible
	// duplicate: either may have reached the provider. The
	// claimed_at every other failed claim leaves behind is cleared, so it is
	// not taken for such a mark.
	qSettleFailed = `
UPDATE owed_notifications n
   SET state = 'failed', settled_at = coalesce($3::timestamptz, now()), lease_until = NULL, last_error = $4,
       claimed_at = CASE WHEN $5::boolean OR EXISTS (SELECT 1 FROM owed_notification_attempts a
                                                     WHERE a.notification_id = n.id AND a.possible_duplicate)
                         THEN n.claimed_at END,
       updated_at = coalesce($3::timestamptz, now())` + heldRow

	// qReleaseClaim returns a held row a worker could not send now (rate
	// limited, transient failure) to queued. Its message comes back after
	// the nack's delay; the lease, $4 seconds from now (that delay and the
	// requeue grace), keeps the sweeper from republishing it before then.
	// claimed_at is cleared so the next claim is not taken for a crash.
	//
	// When the send's outcome is unknown ($6: it timed out, or the
	// connection dropped, after the request may have reached the provider)
	// claimed_at stays, so the next claim flags its send as a possible
	// duplicate, exactly as after a worker that died mid-send.
	qReleaseClaim = `
UPDATE owed_notifications
   SET state = 'queued', claimed_at = CASE WHEN $6::boolean THEN claimed_at END,
       lease_until = coalesce($3::timestamptz, now()) + make_interval(secs => $4), last_error = $5,
       updated_at = coalesce($3::timestamptz, now())` + heldRow

	// qRedrive reopens the failed rows of $1 (ids) in the caller's scope, as
	// Redrive documents: back to pending, unsettled, unleased and never
	// published under the new queue generation, so the next sweep leases
	// them at once and publishes a fresh message under a new queue key.
	// attempts is kept: it counts sends tried. claimed_at, the mark that the
	// next send may duplicate an earlier one, is kept as qSettleFailed left
	// it: set only when the last send's outcome was unknown or a send was
	// already recorded as a possible duplicate, since an earlier send that
	// may have reached the provider still may have. A row past its expiry
	// stays failed: a redrive never sends a late nudge.
	//
	// The rows are locked in id order first (see qMarkQueued). The final
	// select reads the rows as they were before the update, so it takes the
	// reopened rows' new state and generation from the update's RETURNING;
	// its instant comes back with each row, for the caller's reasons.
	qRedrive = `
WITH target AS (
    SELECT id FROM owed_notifications WHERE id = ANY($1) ORDER BY id FOR UPDATE
), reopened AS (
    UPDATE owed_notifications n
       SET state = 'pending', settled_at = NULL, lease_until = NULL, published_at = NULL,
           queue_generation = n.queue_generation + 1,
           last_error = 'redriven after: ' || coalesce(n.last_error, 'failed'),
           updated_at = coalesce($2::timestamptz, now())
      FROM target t
     WHERE n.id = t.id AND n.state = 'failed'
       AND (n.expires_at IS NULL OR n.expires_at > coalesce($2::timestamptz, now()))
    RETURNING n.id, n.state, n.queue_generation
)
SELECT n.id, n.tenant_id, coalesce(r.state, n.state), coalesce(r.queue_generation, n.queue_generation),
       r.id IS NOT NULL, n.expires_at, coalesce($2::timestamptz, now())
  FROM owed_notifications n
  JOIN target t ON t.id = n.id
  LEFT JOIN reopened r ON r.id = n.id`

	// qRecordAttempt appends one send tried and counts it on the row.
	qRecordAttempt = `
WITH counted AS (
    UPDATE owed_notifications SET attempts = attempts + 1, updated_at = $4
     WHERE id = $1
    RETURNING id, tenant_id, attempts
)
INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at, finished_at,
                                   outcome, provider_message_id, http_status, error, possible_duplicate)
SELECT id, tenant_id, attempts, $2, $3, $4, $5, $6, $7, $8, $9 FROM counted
RETURNING attempt`

	qGet = `SELECT ` + notificationColumns + ` FROM owed_notifications WHERE id = $1`

	qAttempts = `
SELECT attempt, provider, started_at, finished_at, outcome, provider_message_id, http_status, error,
       possible_duplicate
  FROM owed_notification_attempts WHERE notification_id = $1 ORDER BY attempt`

	// qBacklog counts owed rows by state (owed_ledger_backlog); it reads
	// only the partial index's rows, so its cost follows the backlog, not the
	// ledger. Its instant comes back with each group, so the caller measures
	// ages from it.
	qBacklog = `SELECT state, owed, oldest_due_at, asked_at FROM owed_ledger_backlog($1)`

	// qStats summarises the rows settled since $1 for operators
	// (owed_ledger_stats), with the rows the provider accepted more than
	// once and the resends made after a worker died mid-send.
	qStats = `SELECT delivered, expired, failed, skipped, cancelled, lag_p50, lag_p95, lag_max,
       duplicate_rows, possible_duplicates FROM owed_ledger_stats($1)`

	// qTenantsOf says whose rows the ids $1 are (owed_ledger_tenants_of), for
	// an operator who names rows by id alone; the rows are then read or
	// redriven in their own tenant's scope.
	qTenantsOf = `SELECT id, tenant_id FROM owed_ledger_tenants_of($1)`

	// qAudit summarises each of a tenant's rows with its sends.
	qAudit = `
SELECT n.id, n.state, n.expires_at, n.settled_at,
       count(a.id) FILTER (WHERE a.outcome = 'accepted'),
       coalesce(bool_or(a.possible_duplicate), false)
  FROM owed_notifications n LEFT JOIN owed_notification_attempts a ON a.notification_id = n.id
 WHERE n.tenant_id = $1
 GROUP BY n.id`
)

const (
	// qLeasableFair tells whether a lease could have returned something,
	// room allowing (owed_sweep_leasable_fair: $1 now, $2 the publish-ahead
	// window, $3-$5 the accounts as LeaseParams.args gives them): the check
	// behind "a sweep that leased nothing while rows are owed".
	qLeasableFair = `SELECT owed_sweep_leasable_fair($1, $2, $3, $4, $5)`

	// qSurveyFair is what a sweep run looks at before it leases, in one
	// statement (owed_sweep_survey_fair: $1 now, $2 the publish-ahead
	// window and $3 how far ahead a live lease may end, in seconds, $4-$6
	// the accounts, $7 how many rows in flight to read at most): each
	// account's rows in flight (read from owed_notifications_in_flight's
	// live range), whether pending rows and rows whose lease ran out wait
	// (the first index entry of each), and the age in seconds of the oldest
	// unsettled row already due, with the instant it was asked at. An idle
	// survey costs the rows in flight, not what the ledger holds.
	qSurveyFair = `SELECT outstanding, pending, requeues, oldest_owed_age_s, asked_at
  FROM owed_sweep_survey_fair($1, $2, $3, $4, $5, $6, $7)`

	// qSendRates counts the sends finished in the last $2 seconds before $1
	// per provider, reading at most $3 attempts (owed_sweep_send_rates).
	qSendRates = `SELECT provider, sends FROM owed_sweep_send_rates($1, $2, $3)`
)
