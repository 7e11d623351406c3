-- Every statement the ledger runs (internal/ledger), by name; the Go code
-- binds each to a variable when the package is initialised (queries.go and
-- beside each caller) and never writes SQL of its own. The schema they run
-- on is this folder's other files (docs/sql.md).
--
-- "Now" is always written coalesce($n::timestamptz, now()) with the Ledger
-- clock's NowOrNil as $n: nil in production, so the database's clock decides
-- (now() is the transaction's start, so every statement of one transaction
-- agrees on the instant), or a test's stubbed instant. A time derived from
-- now (a lease's end, a publish-ahead horizon) is computed here from that
-- same expression and a duration in seconds, never in Go from another clock.


-- Reading rows, in the caller's tenant scope.

-- fragment: notificationColumns
-- notificationColumns are a row's columns as the ledger reads them back:
-- the payload is the row's own or, for a row of an event, the shared one
-- (owed_event_payloads, sql/notifications.sql). Selected FROM
-- owed_notifications, unaliased.
id, tenant_id, recipient, channel, kind, ref_id, due_at, expires_at,
       coalesce(payload, (SELECT p.payload FROM owed_event_payloads p
                           WHERE p.tenant_id = owed_notifications.tenant_id AND p.id = owed_notifications.payload_id)),
       state, attempts, lease_until, claimed_at, published_at, delivered_at, settled_at,
       provider, provider_message_id, last_error, created_at, updated_at, queue_generation, claim_seq

-- fragment: localColumns
-- localColumns are the row's local-time, quiet-hours and digest columns, which
-- the reads that answer callers add after notificationColumns
-- (ledger.scanRow); the worker's claim leaves them out.
time_zone, due_local, held_from, urgent, digest_id, digest_from

-- name: Get
-- Get reads one row in the caller's tenant scope.
SELECT {{notificationColumns}}, {{localColumns}} FROM owed_notifications WHERE id = $1

-- name: Attempts
-- Attempts lists a row's sends, first first.
SELECT attempt, provider, started_at, finished_at, outcome, provider_message_id, http_status, error,
       possible_duplicate
  FROM owed_notification_attempts WHERE notification_id = $1 ORDER BY attempt

-- name: RowsIn
-- RowsIn reads the rows of one tenant among the ids $1, in that
-- tenant's scope.
SELECT {{notificationColumns}}, {{localColumns}} FROM owed_notifications WHERE id = ANY($1)

-- fragment: findFilter
-- findFilter is a list's filter over a tenant's rows (ledger.Filter; an
-- empty value matches every row): $1 tenant, $2 recipient, $3 ref_id, $4
-- kind, $5 state, $6 channel, $7 a recipient prefix, $8 and $9 a due
-- range [from, to) ('-infinity' and 'infinity' when open), $10 and $11 a
-- settled range [from, to) (NULL when open). The tenant and the due range
-- bound the index owed_notifications_tenant_due (tenant_id, due_at, id);
-- the rest filter the rows it yields.
 WHERE tenant_id = $1
   AND ($2 = '' OR recipient = $2)
   AND ($3 = '' OR ref_id = $3)
   AND ($4 = '' OR kind = $4)
   AND ($5 = '' OR state = $5)
   AND ($6 = '' OR channel = $6)
   AND ($7 = '' OR starts_with(recipient, $7))
   AND due_at >= $8::timestamptz AND due_at < $9::timestamptz
   AND ($10::timestamptz IS NULL OR settled_at >= $10::timestamptz)
   AND ($11::timestamptz IS NULL OR settled_at < $11::timestamptz)

-- name: FindPage
-- FindPage lists a tenant's rows matching findFilter, newest due first,
-- from a position: rows ordered after $12/$13 in (due_at DESC, id DESC).
-- The first page passes 'infinity', which every due time precedes. The
-- index owed_notifications_tenant_due (tenant_id, due_at, id) serves it
-- read backwards, stopping at the page's last row; the +1 in the limit
-- ($14) tells whether another page follows.
SELECT {{notificationColumns}}, {{localColumns}} FROM owed_notifications
{{findFilter}}
   AND (due_at, id) < ($12::timestamptz, $13::bigint)
 ORDER BY due_at DESC, id DESC
 LIMIT $14

-- name: FindPagePlan
-- FindPagePlan is run before FindPage in its transaction. The tenant is
-- named twice to the planner, by the row-level security policy
-- (owed_tenant_scope) and by FindPage's own tenant_id = $1, and it takes
-- the two as independent: at a fiftieth of the rows each, it expects a
-- tenant to hold a fiftieth of its real rows. On the partitioned ledger
-- that made a bitmap read of the tenant's every row in every month, then
-- a sort, look cheaper than reading each month's
-- owed_notifications_tenant_due backwards and merging them (Merge Append)
-- until the page is full: 4,842 buffers against 90 for a first page of
-- 240,000 rows over twelve months. Without bitmap scans the planner takes
-- the merge, and a filter that names few rows (a recipient) still reads
-- its own index and sorts what it finds.
SELECT set_config('enable_bitmapscan', 'off', true)

-- name: CountFind
-- CountFind counts a tenant's rows matching findFilter by state, reading
-- at most $12 of them (through the same index as FindPage), so a count over
-- a large tenant costs a bounded read; the caller says "at least" when the
-- counts add up to $12.
SELECT state, count(*) FROM (
    SELECT state FROM owed_notifications
    {{findFilter}}
     LIMIT $12) m
 GROUP BY state

-- name: Audit
-- Audit summarises each of a tenant's rows with its sends.
SELECT n.id, n.state, n.expires_at, n.settled_at,
       count(a.id) FILTER (WHERE a.outcome = 'accepted'),
       coalesce(bool_or(a.possible_duplicate), false)
  FROM owed_notifications n LEFT JOIN owed_notification_attempts a ON a.notification_id = n.id
 WHERE n.tenant_id = $1
 GROUP BY n.id

-- Scheduling, cancelling and rescheduling (schedule.go).

-- name: Schedule
-- Schedule inserts a batch idempotently. The batch travels as one JSON
-- array so a thousand rows cost one round trip. Rows already there are
-- found by the schedule key in the final select. A row created answers
-- the state it was stored in: pending, or expired when it was already
-- past its default grace (owed_apply_default_grace, sql/grace.sql).
WITH input AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(
        idx int, recipient text, channel text, kind text, ref_id text,
        due_at timestamptz, expires_at timestamptz, payload jsonb, payload_id bigint,
        time_zone text, due_local timestamp, held_from timestamptz, urgent boolean, digest_from timestamptz)
), ins AS (
    INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at,
                               payload, payload_id, created_at, updated_at, time_zone, due_local, held_from,
                               urgent, digest_from)
    SELECT $2, recipient, channel, kind, ref_id, due_at, expires_at, payload, payload_id,
           coalesce($3::timestamptz, now()), coalesce($3::timestamptz, now()), time_zone, due_local, held_from,
           coalesce(urgent, false), digest_from
      FROM input ORDER BY idx
    ON CONFLICT ON CONSTRAINT owed_notifications_schedule_key DO NOTHING
    RETURNING id, recipient, kind, ref_id, due_at, state
)
SELECT i.idx, coalesce(ins.id, n.id), ins.id IS NOT NULL, coalesce(ins.state, n.state, 'pending')
  FROM input i
  LEFT JOIN ins ON (ins.recipient, ins.kind, ins.ref_id, ins.due_at) = (i.recipient, i.kind, i.ref_id, i.due_at)
  LEFT JOIN owed_notifications n ON n.tenant_id = $2
       AND (n.recipient, n.kind, n.ref_id, n.due_at) = (i.recipient, i.kind, i.ref_id, i.due_at)
 ORDER BY i.idx

-- name: ContactZones
-- ContactZones reads the default time zone of each (recipient $2[i],
-- channel $3[i]) from the recipient's contacts (owed_contacts,
-- internal/resolve/sql/contacts.sql): the contact on the row's channel
-- first, else the recipient's contact on another channel that names one.
-- A recipient without one is left out.
SELECT w.i, c.time_zone
  FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS w(recipient, channel, i)
 CROSS JOIN LATERAL (SELECT time_zone FROM owed_contacts c
                      WHERE c.tenant_id = $1 AND c.recipient = w.recipient AND c.time_zone IS NOT NULL
                      ORDER BY c.channel <> w.channel, c.channel LIMIT 1) c

-- name: FindScheduled
-- FindScheduled looks up rows a concurrent scheduler inserted after
-- Schedule's snapshot was taken (ON CONFLICT saw them, the join did not).
SELECT id, state FROM owed_notifications
 WHERE tenant_id = $1 AND recipient = $2 AND kind = $3 AND ref_id = $4 AND due_at = $5

-- name: InsertSharedPayload
-- InsertSharedPayload stores a payload several rows of one batch
-- share, once ($1 tenant, $2 payload, $3 now); the rows name its id.
INSERT INTO owed_event_payloads (tenant_id, payload, created_at)
VALUES ($1, $2::jsonb, coalesce($3::timestamptz, now()))
RETURNING id

-- name: DeleteSharedPayloads
-- DeleteSharedPayloads removes shared payloads ($2) no row of their
-- batch took, the rows being there already (a replayed event).
DELETE FROM owed_event_payloads WHERE tenant_id = $1 AND id = ANY($2)

-- fragment: subjectOpenRows
-- subjectOpenRows picks the open rows of one subject ($1 tenant, $2
-- kind, $3 ref_id; $4 is now) for Cancel and Reschedule. A row a
-- worker is sending right now is left alone here: its outcome is the
-- truth, and the cancel or reschedule is recorded on it as an intent
-- instead (RecordCancel, RecordReschedule in schedule.go), applied
-- when the send ends (owed_apply_intent, sql/intents.sql). A row whose
-- claim is still revocable (its worker has not started the send:
-- claim_revocable, sql/notifications.sql) is open: the change takes it
-- back from the claim, and the worker's StartSends then refuses to send
-- it.
--
-- The rows are locked in id order first, as every multi-row update a
-- worker may race is (see MarkQueued).
  FROM (SELECT id FROM owed_notifications
         WHERE tenant_id = $1 AND kind = $2 AND ref_id = $3 AND settled_at IS NULL
         ORDER BY id FOR UPDATE) l
 WHERE n.id = l.id
   AND n.settled_at IS NULL
   AND (n.state <> 'sending' OR n.lease_until <= coalesce($4::timestamptz, now()) OR n.claim_revocable)

-- name: Cancel
-- Cancel settles the open rows of one subject.
UPDATE owed_notifications n
   SET state = 'cancelled', settled_at = coalesce($4::timestamptz, now()), lease_until = NULL,
       updated_at = coalesce($4::timestamptz, now()), last_error = 'cancelled'
{{subjectOpenRows}}

-- name: CountInFlight
-- CountInFlight counts rows of one subject that are being sent now:
-- their worker holds a live claim and has started the send.
SELECT count(*) FROM owed_notifications
 WHERE tenant_id = $1 AND kind = $2 AND ref_id = $3
   AND state = 'sending' AND lease_until > coalesce($4::timestamptz, now()) AND NOT claim_revocable

-- fragment: movedExpiry
-- movedExpiry is a row's expiry moved by as much as its due time moves
-- to $5.
n.expires_at + ($5 - n.due_at)

-- fragment: maxTime
-- maxTime is ledger.MaxTime, the last instant a ledger time may hold (the
-- years 1 to 9999 in UTC, validate.go).
'9999-12-31 23:59:59.999999+00'::timestamptz

-- fragment: shiftedExpiry
-- shiftedExpiry is movedExpiry no later than maxTime: a far expiry moved
-- far ahead would otherwise be a time no API answer or queue message can
-- write. Reschedule refuses a move that needs the clamp (ExpiryPastMax),
-- so it only matters for a row scheduled while the reschedule ran. A row
-- without an expiry keeps none: least() ignores a NULL, and would give it
-- maxTime.
CASE WHEN n.expires_at IS NOT NULL THEN least({{movedExpiry}}, {{maxTime}}) END

-- name: ExpiryPastMax
-- ExpiryPastMax counts the subject's unsettled rows (open or in flight:
-- Reschedule moves the one, RecordReschedule records the move on the
-- other) whose expiry a move to $5 would carry past maxTime, and gives the
-- latest due time that would keep all of them. It first locks every
-- unsettled row of the subject in id order, the rows and the order
-- Reschedule locks, so no row's times change between the count and the
-- move (and the two cannot deadlock). It takes the change's arguments; $4
-- (now) is only typed, as every statement must type each parameter it is
-- given.
SELECT count(*) FILTER (WHERE {{movedExpiry}} > {{maxTime}}),
       min({{maxTime}} - (n.expires_at - n.due_at)) FILTER (WHERE {{movedExpiry}} > {{maxTime}})
  FROM (SELECT expires_at, due_at FROM owed_notifications
         WHERE tenant_id = $1 AND kind = $2 AND ref_id = $3 AND settled_at IS NULL
           AND coalesce($4::timestamptz, now()) IS NOT NULL
         ORDER BY id FOR UPDATE) n

-- name: Reschedule
-- Reschedule moves the open rows of one subject to a new due time ($5),
-- shifting an expiry by the same amount so the window a nudge is worth
-- sending in keeps its length. The new due_at gives the row a new
-- idempotency key; a message already published under the old one is
-- recognised as stale by the worker. published_at is cleared because the
-- new key was never published. The queue generation moves on too: a
-- snooze and un-snooze back to a due time already published must not
-- reuse that message's queue key, or a queue that deduplicates would
-- drop the new message as a copy of the old one, which the worker
-- acked as stale. due_local is cleared: the row is now due at an instant,
-- not at the local time it was scheduled for (sql/notifications.sql).
-- claimed_at stays: on a row re-opened after a claim
-- that lapsed mid-send (or released with an uncertain outcome) it marks
-- that the provider may have the row already, so the send at the new
-- time is recorded as a possible duplicate; a claim revoked before its
-- send never stamped it.
UPDATE owed_notifications n
   SET due_at = $5, expires_at = {{shiftedExpiry}}, due_local = NULL, held_from = NULL,
       digest_id = NULL, digest_from = NULL,
       state = 'pending', lease_until = NULL, published_at = NULL,
       queue_generation = n.queue_generation + 1,
       updated_at = coalesce($4::timestamptz, now())
{{subjectOpenRows}}

-- An operator's change of one row (rowchange.go): the console's cancel,
-- reschedule and send now on a notification's page. LockRow locks the row
-- and reads what the decision needs; the caller refuses a settled row or
-- one a live worker is sending (the rows subjectOpenRows leaves alone),
-- then runs one of the three changes in the same transaction, so nothing
-- moves the row between the decision and the change.

-- name: LockRow
-- LockRow locks row $1 in the caller's tenant scope and reads its state,
-- times and whether a live worker is sending it, at $2 (now).
SELECT state, due_at, expires_at, settled_at,
       state = 'sending' AND lease_until > coalesce($2::timestamptz, now()) AND NOT claim_revocable,
       coalesce($2::timestamptz, now())
  FROM owed_notifications WHERE id = $1 FOR UPDATE

-- name: CancelRow
-- CancelRow settles row $1 cancelled at $2 (now), with the reason $3.
UPDATE owed_notifications
   SET state = 'cancelled', settled_at = coalesce($2::timestamptz, now()), lease_until = NULL,
       updated_at = coalesce($2::timestamptz, now()), last_error = $3
 WHERE id = $1

-- name: MoveRow
-- MoveRow moves row $1 to the due time $3 and the expiry $4 (the caller's:
-- Reschedule's shift, or the same expiry for a send now), pending under a
-- new queue generation, as Reschedule moves a subject's rows: the new due
-- time is a new idempotency key, a message published under the old one is
-- stale, and the next sweep (or the owed_due wake-up, for a row due now)
-- publishes a new one. The move is by instant and an operator's word, so
-- it clears the local time asked and any hold for quiet hours.
UPDATE owed_notifications
   SET due_at = $3, expires_at = $4, state = 'pending', lease_until = NULL, published_at = NULL,
       due_local = NULL, held_from = NULL, digest_id = NULL, digest_from = NULL,
       queue_generation = queue_generation + 1, updated_at = coalesce($2::timestamptz, now())
 WHERE id = $1

-- The intents (schedule.go): a cancel or reschedule of a row a live
-- worker is sending is recorded on the row and applied when the send ends
-- (owed_apply_intent, sql/intents.sql).

-- fragment: subjectInFlight
-- subjectInFlight is the subject's rows a live worker is sending ($1
-- tenant, $2 kind, $3 ref_id, $4 now), with their recipients.
SELECT n.id, n.recipient FROM owed_notifications n
 WHERE n.tenant_id = $1 AND n.kind = $2 AND n.ref_id = $3 AND n.settled_at IS NULL
   AND n.state = 'sending' AND n.lease_until > coalesce($4::timestamptz, now()) AND NOT n.claim_revocable

-- name: RecordCancel
-- RecordCancel records a cancel on the subject's rows in flight,
-- replacing a reschedule or an update still waiting there: the cancel is
-- the later word.
WITH recorded AS (
    UPDATE owed_notifications n
       SET intent = 'cancel', intent_due_at = NULL, intent_expires_at = NULL, intent_payload = NULL,
           intent_due_local = NULL, intent_held_from = NULL, intent_time_zone = NULL,
           intent_at = coalesce($4::timestamptz, now()), intent_outcome = NULL,
           updated_at = coalesce($4::timestamptz, now())
      FROM ({{subjectInFlight}}) t
     WHERE n.id = t.id
    RETURNING n.id
)
SELECT count(*), false FROM recorded

-- name: RecordReschedule
-- RecordReschedule records a move to $5 on the subject's rows in
-- flight, except one whose cancel is still waiting (the cancel came
-- first and wins, as for an open row a cancel already settled). The
-- expiry target shifts by the same amount, as Reschedule shifts it.
-- It records nothing and reports a clash when a row would land on the
-- schedule key of another row (open or settled, moved there by
-- Reschedule a moment ago included), or two rows in flight of one
-- recipient on one key: the clash Reschedule meets as a unique
-- violation, met here before the intent is applied, so a release never
-- fails on it. An update still waiting keeps its payload and stays an
-- update, now to the new due time (and in its zone). The move is
-- recorded as asked; ledger.Reschedule then holds it for quiet hours.
WITH target AS (
    SELECT t.id, t.recipient FROM ({{subjectInFlight}}) t
      JOIN owed_notifications n ON n.id = t.id
     WHERE n.intent IS DISTINCT FROM 'cancel' OR n.intent_outcome IS NOT NULL
), clash AS (
    SELECT 1 FROM target t
     WHERE EXISTS (SELECT 1 FROM owed_notifications o
                    WHERE o.tenant_id = $1 AND o.recipient = t.recipient AND o.kind = $2 AND o.ref_id = $3
                      AND o.due_at = $5::timestamptz AND o.id <> t.id)
        OR (SELECT count(*) FROM target u WHERE u.recipient = t.recipient) > 1
), recorded AS (
    UPDATE owed_notifications n
       SET intent = CASE WHEN n.intent = 'update' AND n.intent_outcome IS NULL THEN 'update' ELSE 'reschedule' END,
           intent_payload = CASE WHEN n.intent = 'update' AND n.intent_outcome IS NULL THEN n.intent_payload END,
           intent_time_zone = CASE WHEN n.intent = 'update' AND n.intent_outcome IS NULL THEN n.intent_time_zone END,
           intent_due_local = NULL, intent_due_at = $5, intent_expires_at = {{shiftedExpiry}},
           intent_held_from = NULL,
           intent_at = coalesce($4::timestamptz, now()), intent_outcome = NULL,
           updated_at = coalesce($4::timestamptz, now())
      FROM target t
     WHERE n.id = t.id AND NOT EXISTS (SELECT 1 FROM clash)
    RETURNING n.id
)
SELECT count(*), EXISTS (SELECT 1 FROM clash) FROM recorded

-- Updating one row (update.go): ledger.Update locks the row, decides, and
-- changes it in place or records the change as an intent.

-- fragment: updateColumns
-- updateColumns are what ledger.Update reads of the row it changes.
-- in_flight is the rows a live worker is sending, whose send has started
-- (subjectInFlight's rule); $2 is now. The due time of a reschedule or
-- update waiting is the one it asked for, before quiet hours held it.
id, recipient, kind, ref_id, channel, state, due_at, expires_at, due_local, time_zone,
       intent IS NOT NULL AND intent_outcome IS NULL AND intent = 'cancel',
       CASE WHEN intent IN ('reschedule', 'update') AND intent_outcome IS NULL
            THEN coalesce(intent_held_from, intent_due_at) END,
       CASE WHEN intent IN ('reschedule', 'update') AND intent_outcome IS NULL THEN intent_expires_at END,
       CASE WHEN intent = 'update' AND intent_outcome IS NULL THEN intent_payload END,
       state = 'sending' AND lease_until > coalesce($2::timestamptz, now()) AND NOT claim_revocable

-- name: LockRowByID
-- LockRowByID locks one unsettled row ($1 id) for ledger.Update, in the
-- caller's tenant scope; $2 is now.
SELECT {{updateColumns}} FROM owed_notifications WHERE id = $1 AND settled_at IS NULL FOR UPDATE

-- name: LockRowByKey
-- LockRowByKey locks the unsettled row of one schedule key ($3
-- recipient, $4 kind, $5 ref_id, $6 due_at) in tenant $1 for
-- ledger.Update; $2 is now.
SELECT {{updateColumns}} FROM owed_notifications
 WHERE tenant_id = $1 AND recipient = $3 AND kind = $4 AND ref_id = $5 AND due_at = $6 AND settled_at IS NULL
 FOR UPDATE

-- name: RowState
-- RowState reads a row's state ($1 id), to say why Update found no
-- unsettled row.
SELECT state FROM owed_notifications WHERE id = $1

-- name: RowStateByKey
-- RowStateByKey is RowState by schedule key ($1 tenant, $2 recipient, $3
-- kind, $4 ref_id, $5 due_at).
SELECT id, state FROM owed_notifications
 WHERE tenant_id = $1 AND recipient = $2 AND kind = $3 AND ref_id = $4 AND due_at = $5

-- name: HandBackLapsed
-- HandBackLapsed hands back a row ($1) whose claim ran out with an intent
-- waiting, as owed_claim does (claim.sql), so owed_apply_intent applies
-- the earlier word before an update is decided; $2 is now.
UPDATE owed_notifications n
   SET state = 'queued', lease_until = coalesce($2::timestamptz, now()), updated_at = coalesce($2::timestamptz, now())
 WHERE n.id = $1 AND n.state = 'sending' AND n.lease_until <= coalesce($2::timestamptz, now())
   AND n.intent IS NOT NULL AND n.intent_outcome IS NULL

-- name: UpdateOpen
-- UpdateOpen applies an update to an open row ($1 id; $2 now; $3 the new
-- payload or NULL to keep it; $4 due_at, $5 expires_at, $6 due_local, $7
-- time_zone, the row's new values). A new due time moves the row as
-- Reschedule moves it (pending, unpublished, a new queue generation); a
-- row whose worker holds a revocable claim, or one that ran out, is taken
-- back from it (queued, its lease ended, as owed_claim hands back a lapsed
-- claim), so the worker's check before the send finds the claim gone and
-- never sends the old content, and the sweep republishes the row.
UPDATE owed_notifications n
   SET payload = coalesce($3::jsonb, n.payload),
       payload_id = CASE WHEN $3::jsonb IS NULL THEN n.payload_id END,
       due_at = $4, expires_at = $5, due_local = $6, time_zone = $7,
       held_from = CASE WHEN n.due_at <> $4 THEN NULL ELSE n.held_from END,
       digest_id = CASE WHEN n.due_at <> $4 THEN NULL ELSE n.digest_id END,
       digest_from = CASE WHEN n.due_at <> $4 THEN NULL ELSE n.digest_from END,
       state = CASE WHEN n.due_at <> $4 THEN 'pending'
                    WHEN n.state = 'sending' THEN 'queued' ELSE n.state END,
       lease_until = CASE WHEN n.due_at <> $4 THEN NULL
                          WHEN n.state = 'sending' THEN least(n.lease_until, coalesce($2::timestamptz, now()))
                          ELSE n.lease_until END,
       published_at = CASE WHEN n.due_at <> $4 THEN NULL ELSE n.published_at END,
       queue_generation = n.queue_generation + CASE WHEN n.due_at <> $4 THEN 1 ELSE 0 END,
       updated_at = coalesce($2::timestamptz, now())
 WHERE n.id = $1 AND n.settled_at IS NULL

-- name: RecordUpdate
-- RecordUpdate records an update on a row a live worker is sending ($1
-- id; $2 now; $3 the new payload or NULL to keep it; $4 due_at, $5
-- expires_at, $6 due_local, $7 time_zone: the row's values once the
-- update applies), replacing a reschedule or update waiting there
-- (ledger.Update folded it into these values). owed_apply_intent applies
-- it when the send ends. The due time is recorded as asked; ledger.Update
-- then holds it for quiet hours.
UPDATE owed_notifications n
   SET intent = 'update', intent_payload = $3::jsonb, intent_due_at = $4, intent_expires_at = $5,
       intent_due_local = $6, intent_time_zone = $7, intent_held_from = NULL, intent_at = coalesce($2::timestamptz, now()), intent_outcome = NULL,
       updated_at = coalesce($2::timestamptz, now())
 WHERE n.id = $1 AND n.state = 'sending'

-- name: KeyTaken
-- KeyTaken says whether another row ($2 is the row's id) holds the
-- schedule key a move would give it ($1 tenant, $3 recipient, $4 kind, $5
-- ref_id, $6 due_at).
SELECT EXISTS (SELECT 1 FROM owed_notifications
                WHERE tenant_id = $1 AND recipient = $3 AND kind = $4 AND ref_id = $5 AND due_at = $6 AND id <> $2)

-- The sweeper's statements here cross tenants, so each is a SECURITY
-- DEFINER function owned by owed_definer (sql/sweep.sql), the only
-- way the runtime role reaches another tenant's rows, and returns only
-- the columns read here. The comments say what each function's SQL does.

-- name: SurveyFair
-- SurveyFair is what a sweep run looks at before it leases, in one
-- statement (owed_sweep_survey_fair: $1 now, $2 the publish-ahead window
-- and $3 how far ahead a live lease may end, in seconds, $4-$6 the
-- accounts, $7 how many rows in flight to read at most): each account's
-- rows in flight (read from owed_notifications_in_flight's live range),
-- whether pending rows and rows whose lease ran out wait (the first index
-- entry of each), and the age in seconds of the oldest unsettled row
-- already due, with the instant it was asked at. An idle survey costs the
-- rows in flight, not what the ledger holds.
SELECT outstanding, pending, requeues, oldest_owed_age_s, asked_at
  FROM owed_sweep_survey_fair($1, $2, $3, $4, $5, $6, $7)

-- name: LeasableFair
-- LeasableFair tells whether a lease could have returned something, room
-- allowing (owed_sweep_leasable_fair: $1 now, $2 the publish-ahead window,
-- $3-$5 the accounts as LeaseParams.args gives them): the check behind "a
-- sweep that leased nothing while rows are owed".
SELECT owed_sweep_leasable_fair($1, $2, $3, $4, $5)

-- name: SendRates
-- SendRates counts the sends finished in the last $2 seconds before $1
-- per provider, reading at most $3 attempts (owed_sweep_send_rates): what
-- an unpaced account's workers actually send, which sizes its depth.
SELECT provider, sends FROM owed_sweep_send_rates($1, $2, $3)

-- name: LeaseFair
-- LeaseFair is the sweeper's claim of owed rows, one slice in one
-- statement (owed_sweep_lease_fair_queued, whose text is
-- owed_sweep_fair_lease_sql: sql/sweep.sql explains how it shares the
-- slice between accounts and tenants and which indexes it reads). There is
-- no lower bound on due_at: after a pause, the oldest owed rows go first.
-- Its parameters are LeaseParams.args. It answers the rows in the slice's
-- order, then one row per account, each with the database's now. With
-- $12, the requeue-after in seconds, the pending rows it takes are
-- written queued, as published (the queued mark's write done by the
-- lease); NULL leases them, for a caller that marks every row.
--
-- A row published before (queued or sending with its lease run out: its
-- message was lost, acked or dead-lettered, or its worker died) is
-- republished deliberately, so its queue generation moves on and the new
-- message gets a new queue key. A row still leased and never marked
-- published (the sweep died between the publish and the mark) keeps its
-- generation: its message is probably in the queue already, and the
-- same key lets a deduplicating queue absorb the repeat.
--
-- A row a worker handed back to the ledger (HandBackClaim) is taken once
-- its not-before falls within the publish-ahead window, and answered with
-- it: its message surfaces then.
SELECT id, tenant_id, due_at, republish, queue_generation, account, state, ord, requeue, outstanding,
       room, held, more, asked_at, not_before
  FROM owed_sweep_lease_fair_queued($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, true, $12)

-- name: ExplainLease
-- ExplainLease runs LeaseFair's text under EXPLAIN ANALYZE
-- (owed_sweep_explain_lease_fair); its caller rolls the transaction back.
SELECT owed_sweep_explain_lease_fair($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)

-- name: SetAside
-- SetAside settles failed a leased row whose message cannot be built
-- (owed_sweep_set_aside: $1 the row, $2 now, $3 the reason).
SELECT owed_sweep_set_aside($1, $2, $3)

-- name: ExpireOverdue
-- ExpireOverdue settles rows whose expiry passed before they were sent
-- (owed_sweep_expire, $1 now, $2 the limit) and counts them. A row a
-- live worker is sending is skipped: that worker checked the expiry when
-- it claimed the row.
SELECT owed_sweep_expire($1, $2)

-- name: MarkQueued
-- MarkQueued records that the queue accepted the messages of rows $1
-- (owed_sweep_mark_queued). Only rows still leased change: a worker may
-- already have claimed (or even delivered) a row whose message it
-- received before this statement ran. The lease runs from the due time
-- ($3 seconds past it), since a message published ahead is invisible
-- until then.
--
-- Every statement that updates several rows that workers may be
-- claiming at the same moment locks them first, in id order, as the
-- workers' batched claims and settles do (sql/claim.sql): two
-- transactions that lock overlapping rows in the same order wait for
-- each other instead of deadlocking. This one and ReleaseLeased do.
SELECT owed_sweep_mark_queued($1, $2, $3)

-- name: ReleaseLeased
-- ReleaseLeased hands back the rows of $1 that are still as the lease
-- left them (leased, or written queued by the lease and untouched since:
-- owed_unpublished), whose messages were not accepted, so the next sweep
-- takes them at once (owed_sweep_release).
SELECT owed_sweep_release($1, $2)

-- The worker's statements: the claim, its heartbeat, and every settle or
-- release after it.

-- name: ClaimMany
-- ClaimMany is the worker's claim of many rows, possibly of many
-- tenants, in one statement and one commit: owed_claim_many
-- (sql/claim.sql) takes, in one set-based UPDATE under the scope of every
-- tenant the batch names, each row ($1 idx, $2 tenant, $3 id, $4 the due
-- time its message names) that is owed, due (within the early tolerance,
-- $8 seconds), for that due time, unexpired and not held by a live
-- worker, each matched with the tenant its message named. It returns
-- each row as it was plus whether it was taken, and the caller reads the
-- old row to say why a claim took nothing. A settled row is never taken,
-- failed included: only Redrive reopens a failed row, so a stray or
-- redriven copy of its message sends nothing. A row not visible in its
-- tenant's scope answers nothing for its idx. $5 makes every claim of
-- the batch revocable until its send starts (ExtendMany with start_send).
--
-- A claim that takes the row moves its claim_seq on, and the row comes
-- back with the new value: the token of this claim, which every later
-- write names (heldRow). Each row taken comes back with the undeliverable
-- mark of its recipient on its channel (its provider, code and instant,
-- NULL when unmarked), so the worker's check of the mark costs no
-- transaction of its own.
--
-- The claim's instant comes back as the last column, so the caller
-- judges the rows by the instant that took them, and the lease ($7
-- seconds) runs from it.
SELECT c.*, t.now
  FROM (SELECT coalesce($6::timestamptz, now()) AS now) t,
       owed_claim_many($1::integer[], $2::text[], $3::bigint[], $4::timestamptz[], $5::boolean, t.now,
                       t.now + make_interval(secs => $7), t.now + make_interval(secs => $8)) c

-- name: ExtendMany
-- ExtendMany is the heartbeat of many held claims, possibly of many
-- tenants, in one statement and one commit, or with $5 the check right
-- before their sends: owed_extend_many (sql/claim.sql) moves each row's
-- lease to $7 seconds from now, if the row ($1 idx, $2 tenant, $3 id) is
-- still sending under the token named ($4), and says whether it was; with
-- $5 the claim stops being revocable and claimed_at marks that the send
-- may reach the provider. A lease with $8 seconds or more left is left as
-- it is (the heartbeat passes $7, so it always extends).
SELECT idx, held
  FROM owed_extend_many($1::integer[], $2::text[], $3::bigint[], $4::bigint[], $5::boolean,
                        coalesce($6::timestamptz, now()), coalesce($6::timestamptz, now()) + make_interval(secs => $7),
                        coalesce($6::timestamptz, now()) + make_interval(secs => $8))

-- name: SettleDeliveredMany
-- SettleDeliveredMany records accepted sends and settles their rows in
-- one statement and one commit: owed_settle_delivered_many
-- (sql/settle.sql) judges every row ($1 idx, $2 tenant, $3 id, $4 the
-- send's claim token) on the row as it was, settles those to stamp in one
-- UPDATE and records every attempt ($5 provider, $6 start, $7 message id,
-- $8 HTTP status, $9 possible duplicate) in one INSERT of the same
-- statement. delivered_at is stamped only on a row not delivered yet, so
-- a row has one delivered_at however many copies of its message arrive;
-- the attempt is recorded either way, because it happened. A row failed
-- while its send was still under way (its claim's lease ran out and
-- another worker failed it) is stamped delivered all the same: the
-- provider's yes is the truth.
--
-- Each send names its claim's token. A send made under a claim that
-- another has superseded is recorded as a possible duplicate; when that
-- other claim still holds the row under a live lease (its send may be
-- under way) the row is left to it (held_elsewhere) rather than settled
-- from under it. A row not visible in its tenant's scope answers a NULL
-- changed; a row the statement could not apply is set aside alone
-- (set_aside says why).
SELECT idx, changed, held_elsewhere, set_aside
  FROM owed_settle_delivered_many($1::integer[], $2::text[], $3::bigint[], $4::bigint[], $5::text[],
                                  $6::timestamptz[], $7::text[], $8::integer[], $9::boolean[],
                                  coalesce($10::timestamptz, now()))

-- fragment: heldRow
-- heldRow fences every write a worker makes after its claim: the row
-- ($1) changes only while it is still sending under the claim token its
-- worker holds ($2, owed_notifications.claim_seq: sql/notifications.sql). A
-- row another claim has taken since, or the sweep re-leased after the
-- lease ran out, matches nothing, and the empty RETURNING tells the
-- caller so (ErrClaimLost). $3 is now in each of them.
 WHERE id = $1 AND claim_seq = $2 AND state = 'sending'
RETURNING id

-- name: SettleExpired
-- SettleExpired settles a held row whose expiry passed after its claim.
UPDATE owed_notifications
   SET state = 'expired', settled_at = coalesce($3::timestamptz, now()), lease_until = NULL,
       updated_at = coalesce($3::timestamptz, now()), last_error = 'expired before it was sent'
{{heldRow}}

-- name: SettleSkipped
-- SettleSkipped settles a held row whose recipient has nothing to
-- receive.
UPDATE owed_notifications
   SET state = 'skipped', settled_at = coalesce($3::timestamptz, now()), lease_until = NULL, last_error = $4,
       updated_at = coalesce($3::timestamptz, now())
{{heldRow}}

-- name: SettleFailed
-- SettleFailed settles a held row failed. claimed_at, the mark that the
-- next send may duplicate an earlier one (see Redrive), survives only
-- when the last send's outcome was unknown ($5) or a send of the row
-- (the one just recorded included) was recorded as a possible
-- duplicate: either may have reached the provider. The
-- claimed_at every other failed claim leaves behind is cleared, so it is
-- not taken for such a mark.
UPDATE owed_notifications n
   SET state = 'failed', settled_at = coalesce($3::timestamptz, now()), lease_until = NULL, last_error = $4,
       claimed_at = CASE WHEN $5::boolean OR EXISTS (SELECT 1 FROM owed_notification_attempts a
                                                     WHERE a.notification_id = n.id AND a.possible_duplicate)
                         THEN n.claimed_at END,
       updated_at = coalesce($3::timestamptz, now())
{{heldRow}}

-- name: ReleaseClaim
-- ReleaseClaim returns a held row a worker could not send now (rate
-- limited, transient failure) to queued. Its message comes back after
-- the nack's delay; the lease, $4 seconds from now (that delay and the
-- requeue grace), keeps the sweeper from republishing it before then.
-- claimed_at is cleared so the next claim is not taken for a crash.
--
-- When the send's outcome is unknown ($6: it timed out, or the
-- connection dropped, after the request may have reached the provider)
-- claimed_at stays, so the next claim flags its send as a possible
-- duplicate, exactly as after a worker that died mid-send.
UPDATE owed_notifications
   SET state = 'queued', claimed_at = CASE WHEN $6::boolean THEN claimed_at END,
       lease_until = coalesce($3::timestamptz, now()) + make_interval(secs => $4), last_error = $5,
       updated_at = coalesce($3::timestamptz, now())
{{heldRow}}

-- name: HandBackClaim
-- HandBackClaim hands a held row back to the ledger until its not-before,
-- $4 seconds from now: a wait longer than the queue should hold a message
-- for (a retry's step, a 429's Retry-After, a paused account or tenant),
-- whose message the worker acks once this commits. The row is queued with
-- no message anywhere: lease_until and not_before are the same instant,
-- which is how the sweep knows a hand-back from a message in the queue,
-- so it counts against no account's cap while it waits
-- (owed_sweep_in_flight) and the fair lease takes it by its not-before,
-- publishing its message to surface then (owed_sweep_fair_lease_sql).
-- claimed_at is kept only when the send's outcome is unknown ($6), as in
-- ReleaseClaim.
UPDATE owed_notifications
   SET state = 'queued', claimed_at = CASE WHEN $6::boolean THEN claimed_at END,
       lease_until = coalesce($3::timestamptz, now()) + make_interval(secs => $4),
       not_before = coalesce($3::timestamptz, now()) + make_interval(secs => $4), last_error = $5,
       updated_at = coalesce($3::timestamptz, now())
{{heldRow}}

-- name: ExpireUnclaimed
-- ExpireUnclaimed settles expired a row a claim found past its expiry
-- and did not take ($2 is the claim's instant). A row a live worker is
-- sending is left alone, as ExpireOverdue leaves it: the claim answers
-- ClaimHeld for it, and only its holder settles it.
UPDATE owed_notifications
   SET state = 'expired', settled_at = $2, lease_until = NULL, updated_at = $2,
       last_error = 'expired before it was sent'
 WHERE id = $1 AND settled_at IS NULL AND (state <> 'sending' OR lease_until <= $2)

-- name: RecordAttempt
-- RecordAttempt appends one send tried and counts it on the row.
WITH counted AS (
    UPDATE owed_notifications SET attempts = attempts + 1, updated_at = $4
     WHERE id = $1
    RETURNING id, tenant_id, attempts
)
INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at, finished_at,
                                   outcome, provider_message_id, http_status, error, possible_duplicate)
SELECT id, tenant_id, attempts, $2, $3, $4, $5, $6, $7, $8, $9 FROM counted
RETURNING attempt

-- An operator's redrive of failed rows (redrive.go).

-- name: Redrive
-- Redrive reopens the failed rows of $1 (ids) in the caller's scope, as
-- Redrive documents: back to pending, unsettled, unleased and never
-- published under the new queue generation, so the next sweep leases
-- them at once and publishes a fresh message under a new queue key.
-- attempts is kept: it counts sends tried. claimed_at, the mark that the
-- next send may duplicate an earlier one, is kept as SettleFailed left
-- it: set only when the last send's outcome was unknown or a send was
-- already recorded as a possible duplicate, since an earlier send that
-- may have reached the provider still may have. A row past its expiry
-- stays failed: a redrive never sends a late nudge. A row whose last
-- attempt failed permanently (the provider refused this message or this
-- recipient) stays failed unless $3 forces it: sent again unchanged, it
-- fails the same way in the same second.
--
-- The rows are locked in id order first (see MarkQueued). The final
-- select reads the rows as they were before the update, so it takes the
-- reopened rows' new state and generation from the update's RETURNING;
-- its instant comes back with each row, for the caller's reasons, and so
-- does the last attempt's error when it was permanent.
WITH target AS (
    SELECT n.id, last.outcome = 'permanent' AS permanent, last.error
      FROM owed_notifications n
      LEFT JOIN LATERAL (
          SELECT a.outcome, a.error FROM owed_notification_attempts a
           WHERE a.notification_id = n.id ORDER BY a.attempt DESC LIMIT 1
      ) last ON true
     WHERE n.id = ANY($1) ORDER BY n.id FOR UPDATE OF n
), reopened AS (
    UPDATE owed_notifications n
       SET state = 'pending', settled_at = NULL, lease_until = NULL, published_at = NULL,
           queue_generation = n.queue_generation + 1,
           last_error = 'redriven after: ' || coalesce(n.last_error, 'failed'),
           updated_at = coalesce($2::timestamptz, now())
      FROM target t
     WHERE n.id = t.id AND n.state = 'failed'
       AND (n.expires_at IS NULL OR n.expires_at > coalesce($2::timestamptz, now()))
       AND ($3::boolean OR NOT coalesce(t.permanent, false))
    RETURNING n.id, n.state, n.queue_generation
)
SELECT n.id, n.tenant_id, coalesce(r.state, n.state), coalesce(r.queue_generation, n.queue_generation),
       r.id IS NOT NULL, n.expires_at, coalesce($2::timestamptz, now()),
       CASE WHEN coalesce(t.permanent, false) THEN coalesce(t.error, n.last_error, '') END
  FROM owed_notifications n
  JOIN target t ON t.id = n.id
  LEFT JOIN reopened r ON r.id = n.id

-- The statements of ChangeMaterialised (reconcile.go), in the order it
-- runs them. $1 is the tenant, $2 now, $3 the changes as a JSON array. A
-- row changes only while it is marked materialised and unsettled, so a row
-- that settled since the materialiser read it (delivered above all) is
-- never changed.

-- fragment: materialisedInput
  FROM jsonb_to_recordset($3::jsonb) AS i(id bigint, cancel boolean, reason text,
                                          due_at timestamptz, expires_at timestamptz)
 WHERE n.id = i.id AND n.tenant_id = $1 AND n.materialised AND n.settled_at IS NULL

-- fragment: materialisedOpen
-- materialisedOpen is an open row, as subjectOpenRows says: one no
-- live worker is sending, a row whose claim is still revocable
-- included.
{{materialisedInput}}
   AND (n.state <> 'sending' OR n.lease_until <= coalesce($2::timestamptz, now()) OR n.claim_revocable)

-- fragment: materialisedInFlight
-- materialisedInFlight is a row a live worker is sending.
{{materialisedInput}}
   AND n.state = 'sending' AND n.lease_until > coalesce($2::timestamptz, now()) AND NOT n.claim_revocable

-- fragment: cancelWaits
-- cancelWaits is a cancel still waiting on the row's send.
(n.intent IS NOT DISTINCT FROM 'cancel' AND n.intent_outcome IS NULL)

-- fragment: takenKey
-- takenKey is a row other than n holding the schedule key n is to move
-- to, which the move would violate.
EXISTS (SELECT 1 FROM owed_notifications o
                WHERE o.tenant_id = n.tenant_id AND o.recipient = n.recipient AND o.kind = n.kind
                  AND o.ref_id = n.ref_id AND o.due_at = i.due_at AND o.id <> n.id)

-- name: LockMaterialised
-- LockMaterialised ($1 the tenant, $2 the changes) locks every row
-- the changes name first, in id order, as every multi-row update a
-- worker may race does (see MarkQueued), so no release or settle slips
-- between the statements below.
SELECT count(*) FROM (SELECT n.id FROM owed_notifications n, jsonb_to_recordset($2::jsonb) AS i(id bigint)
                       WHERE n.id = i.id AND n.tenant_id = $1 AND n.materialised AND n.settled_at IS NULL
                       ORDER BY n.id FOR UPDATE OF n) l

-- name: CancelMaterialised
-- CancelMaterialised settles open rows cancelled, as Cancel does.
UPDATE owed_notifications n
   SET state = 'cancelled', settled_at = coalesce($2::timestamptz, now()), lease_until = NULL,
       updated_at = coalesce($2::timestamptz, now()), last_error = coalesce(i.reason, 'cancelled')
{{materialisedOpen}} AND i.cancel

-- name: CancelOntoTaken
-- CancelOntoTaken cancels an open row whose recipient already has a
-- row at the due time it is to move to: that row is the nudge at the
-- new time, as owed_apply_intent decides for a move in flight.
UPDATE owed_notifications n
   SET state = 'cancelled', settled_at = coalesce($2::timestamptz, now()), lease_until = NULL,
       updated_at = coalesce($2::timestamptz, now()),
       last_error = 'rescheduled onto a row already scheduled at that due time'
{{materialisedOpen}} AND NOT i.cancel AND {{takenKey}}

-- name: MoveMaterialised
-- MoveMaterialised moves open rows as Reschedule does (a new due time
-- is a new idempotency key; pending, never published under it, a new
-- queue generation, claimed_at kept as the possible-duplicate mark), to
-- the expiry named rather than a shifted one. A row already there is
-- left as it is, a row held for quiet hours being where it asked to be
-- (held_from); a moved row drops its hold, and ChangeMaterialised holds
-- it again for the windows in force at its new time.
UPDATE owed_notifications n
   SET due_at = i.due_at, expires_at = i.expires_at, held_from = NULL,
       state = 'pending', lease_until = NULL, published_at = NULL,
       queue_generation = n.queue_generation + 1,
       updated_at = coalesce($2::timestamptz, now())
{{materialisedOpen}} AND NOT i.cancel AND NOT {{takenKey}}
   AND (coalesce(n.held_from, n.due_at) <> i.due_at OR n.expires_at IS DISTINCT FROM i.expires_at)

-- name: RecordMaterialisedCancel
-- RecordMaterialisedCancel records a cancel on rows in flight, as
-- RecordCancel does, replacing a reschedule still waiting; a row whose
-- cancel already waits is left alone, so a second run changes nothing.
UPDATE owed_notifications n
   SET intent = 'cancel', intent_due_at = NULL, intent_expires_at = NULL, intent_held_from = NULL,
       intent_at = coalesce($2::timestamptz, now()), intent_outcome = NULL,
       updated_at = coalesce($2::timestamptz, now())
{{materialisedInFlight}} AND i.cancel AND NOT {{cancelWaits}}

-- name: RecordMaterialisedMove
-- RecordMaterialisedMove records a move on rows in flight, as
-- RecordReschedule does, except on a row whose cancel waits (it came
-- first and wins) or whose same move waits already. A clash with a row
-- at the new due time is left to owed_apply_intent, which cancels the
-- row in flight in favour of that row when the send is handed back.
UPDATE owed_notifications n
   SET intent = 'reschedule', intent_due_at = i.due_at, intent_expires_at = i.expires_at, intent_held_from = NULL,
       intent_at = coalesce($2::timestamptz, now()), intent_outcome = NULL,
       updated_at = coalesce($2::timestamptz, now())
{{materialisedInFlight}} AND NOT i.cancel AND NOT {{cancelWaits}}
   AND NOT (n.intent IS NOT DISTINCT FROM 'reschedule' AND n.intent_outcome IS NULL
            AND coalesce(n.intent_held_from, n.intent_due_at) = i.due_at
            AND n.intent_expires_at IS NOT DISTINCT FROM i.expires_at)

-- name: MarkMaterialised
-- MarkMaterialised marks the unsettled rows of $2 (ids) as the
-- materialiser's, so they follow their items from now on.
UPDATE owed_notifications SET materialised = true
 WHERE tenant_id = $1 AND id = ANY($2) AND settled_at IS NULL AND NOT materialised

-- Receipts (receipts.go).

-- name: RecordReceipt
-- RecordReceipt records one receipt against the accepted send with its
-- message id, whatever the tenant (owed_receipt_record): $1 provider
-- family, $2 message id, $3 status, $4 code, $5 the provider's time, $6
-- now.
SELECT known, recorded FROM owed_receipt_record($1, $2, $3, $4, $5, $6)

-- name: ReceiptOutcome
-- ReceiptOutcome reads a row's confirmed outcome in its tenant's scope.
SELECT receipt_status, receipt_code, confirmed_at FROM owed_notifications WHERE id = $1

-- name: Receipts
-- Receipts lists a row's receipts in its tenant's scope, oldest first.
SELECT provider, provider_message_id, status, code, occurred_at, received_at
  FROM owed_receipts WHERE notification_id = $1
 ORDER BY coalesce(occurred_at, received_at), id

-- name: ReceiptStats
-- ReceiptStats is owed_ledger_receipt_stats over the rows settled
-- since $1.
SELECT accepted, confirmed_delivered, bounced, failed, unconfirmed
  FROM owed_ledger_receipt_stats($1)

-- Undeliverable addresses (undeliverable.go), in the caller's tenant scope.

-- fragment: undeliverableColumns
-- A mark's columns, in the order scanUndeliverable reads them.
tenant_id, channel, address, provider, code, reason, coalesce(notification_id, 0), marked_at

-- name: MarkUndeliverable
-- MarkUndeliverable marks an address undeliverable in the caller's tenant
-- scope; marking it again replaces the earlier failure with this one. $8 is
-- now.
INSERT INTO owed_undeliverable
    (tenant_id, channel, address, provider, code, reason, notification_id, marked_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8::timestamptz, now()))
ON CONFLICT (tenant_id, channel, address) DO UPDATE
   SET provider = EXCLUDED.provider, code = EXCLUDED.code, reason = EXCLUDED.reason,
       notification_id = EXCLUDED.notification_id, marked_at = EXCLUDED.marked_at

-- name: LookupUndeliverable
-- LookupUndeliverable reads one mark by the table's key.
SELECT {{undeliverableColumns}}
  FROM owed_undeliverable WHERE tenant_id = $1 AND channel = $2 AND address = $3

-- name: ClearUndeliverable
-- ClearUndeliverable removes one mark (the customer re-subscribed).
DELETE FROM owed_undeliverable
 WHERE tenant_id = $1 AND channel = $2 AND address = $3

-- name: ListUndeliverable
-- ListUndeliverable lists a tenant's marks, newest first, on channel $2
-- only unless it is empty.
SELECT {{undeliverableColumns}}
  FROM owed_undeliverable WHERE tenant_id = $1 AND ($2 = '' OR channel = $2)
 ORDER BY marked_at DESC, channel, address

-- What operators read across tenants, and the audit trail (lookup.go,
-- operator.go).

-- name: TenantsOf
-- TenantsOf says whose rows the ids $1 are (owed_ledger_tenants_of), for
-- an operator who names rows by id alone; the rows are then read or
-- redriven in their own tenant's scope.
SELECT id, tenant_id FROM owed_ledger_tenants_of($1)

-- name: Backlog
-- Backlog counts owed rows by state (owed_ledger_backlog); it reads
-- only the partial index's rows, so its cost follows the backlog, not the
-- ledger. Its instant comes back with each group, so the caller measures
-- ages from it.
SELECT state, owed, oldest_due_at, asked_at FROM owed_ledger_backlog($1)

-- name: Stats
-- Stats summarises the rows settled since $1 for operators
-- (owed_ledger_stats), with the rows the provider accepted more than
-- once and the resends made after a worker died mid-send.
SELECT delivered, expired, failed, skipped, cancelled, lag_p50, lag_p95, lag_max,
       duplicate_rows, possible_duplicates FROM owed_ledger_stats($1)

-- name: SendsPerMinute
-- SendsPerMinute counts the attempts finished in each minute since $1
-- (owed_ledger_sends_per_minute); minutes without one are absent.
SELECT minute, accepted, other FROM owed_ledger_sends_per_minute($1)

-- name: RecordAction
-- RecordAction appends one operator action (owed_operator_audit_record).
SELECT owed_operator_audit_record($1, $2, $3, $4, $5, $6)

-- name: OperatorActions
-- OperatorActions reads the latest $1 operator actions, newest first.
SELECT id, at, operator, action, target, count, reason FROM owed_operator_audit
 ORDER BY at DESC, id DESC LIMIT $1

-- name: SetDefaultGrace
-- SetDefaultGrace makes owed_default_grace hold the scopes $1 with the
-- graces $2 (NULL: none) and nothing else (owed_default_grace_set,
-- sql/grace.sql).
SELECT owed_default_grace_set($1::text[], $2::interval[])

-- Quiet hours (quiet.go): the tenant's send windows, and the holds they
-- put on its pending rows (sql/quiet_hours.sql).

-- name: QuietHours
-- QuietHours reads every scope of one tenant's send windows ($1).
SELECT scope, windows, coalesce(time_zone, '') FROM owed_quiet_hours WHERE tenant_id = $1

-- name: UpsertQuietHours
-- UpsertQuietHours writes one scope's windows ($1 tenant, $2 scope, $3
-- windows, $4 zone or NULL, $5 now).
INSERT INTO owed_quiet_hours (tenant_id, scope, windows, time_zone, updated_at)
VALUES ($1, $2, $3, $4, coalesce($5::timestamptz, now()))
ON CONFLICT (tenant_id, scope) DO UPDATE
   SET windows = EXCLUDED.windows, time_zone = EXCLUDED.time_zone, updated_at = EXCLUDED.updated_at

-- name: DeleteQuietHours
-- DeleteQuietHours removes one scope's windows ($1 tenant, $2 scope).
DELETE FROM owed_quiet_hours WHERE tenant_id = $1 AND scope = $2

-- name: PendingToHold
-- PendingToHold reads the tenant's ($1) pending rows a hold applies to
-- (not urgent), with the due time each was asked for: every one for
-- SetQuietHours, or those of one row ($2) or one subject ($3 kind, $4
-- ref_id) for a move.
SELECT id, recipient, channel, kind, ref_id, coalesce(held_from, due_at), held_from IS NOT NULL, due_at,
       expires_at, coalesce(time_zone, '')
  FROM owed_notifications
 WHERE tenant_id = $1 AND state = 'pending' AND NOT urgent
   AND ($2::bigint = 0 OR id = $2) AND ($3 = '' OR (kind = $3 AND ref_id = $4))

-- name: MoveHolds
-- MoveHolds moves pending rows ($2 ids) to their effective due times ($3)
-- with the due time asked for ($4, NULL when the row is no longer held).
-- A row whose new schedule key another row holds is left alone and not
-- returned: SetQuietHours settles it, that row being the send.
UPDATE owed_notifications n
   SET due_at = x.due, held_from = x.held, updated_at = coalesce($5::timestamptz, now())
  FROM unnest($2::bigint[], $3::timestamptz[], $4::timestamptz[]) AS x(id, due, held)
 WHERE n.id = x.id AND n.tenant_id = $1 AND n.state = 'pending'
   AND NOT EXISTS (SELECT 1 FROM owed_notifications o
                    WHERE o.tenant_id = $1 AND o.recipient = n.recipient AND o.kind = n.kind
                      AND o.ref_id = n.ref_id AND o.due_at = x.due AND o.id <> n.id)
RETURNING n.id

-- name: IntentsToHold
-- IntentsToHold reads the tenant's ($1) moves waiting on a send that a
-- hold applies to (not urgent): every reschedule, and every update that
-- moves its row or is held already, with the due time each asked for and
-- its zone (the update's, else the row's): every one for SetQuietHours,
-- or those of one row ($2) or one subject ($3 kind, $4 ref_id) for the
-- change that recorded it.
SELECT id, recipient, channel, kind, ref_id, coalesce(intent_held_from, intent_due_at), intent_held_from IS NOT NULL,
       intent_due_at, intent_expires_at, coalesce(intent_time_zone, time_zone, '')
  FROM owed_notifications
 WHERE tenant_id = $1 AND state = 'sending' AND intent IN ('reschedule', 'update') AND intent_outcome IS NULL
   AND NOT urgent
   AND (intent = 'reschedule' OR intent_due_at <> due_at OR intent_held_from IS NOT NULL)
   AND ($2::bigint = 0 OR id = $2) AND ($3 = '' OR (kind = $3 AND ref_id = $4))

-- name: MoveIntentHolds
-- MoveIntentHolds gives the waiting moves of rows $2 (ids) their held due
-- times ($3) with the due time asked for ($4, NULL when not held). A
-- clash with a row at the held time is left to owed_apply_intent, which
-- finds it when the send ends (that row is then the send).
UPDATE owed_notifications n
   SET intent_due_at = x.due, intent_held_from = x.held, updated_at = coalesce($5::timestamptz, now())
  FROM unnest($2::bigint[], $3::timestamptz[], $4::timestamptz[]) AS x(id, due, held)
 WHERE n.id = x.id AND n.tenant_id = $1 AND n.state = 'sending' AND n.intent_outcome IS NULL

-- name: SettleHeld
-- SettleHeld settles pending rows ($2 ids) a hold ends ($3 state, expired
-- or cancelled, $4 the reason, $5 now).
UPDATE owed_notifications n
   SET state = $3, settled_at = coalesce($5::timestamptz, now()), lease_until = NULL, last_error = $4,
       updated_at = coalesce($5::timestamptz, now())
 WHERE n.tenant_id = $1 AND n.id = ANY($2) AND n.state = 'pending'

-- The operators' history (history.go, sql/history.sql).

-- name: RecordHistory
-- RecordHistory samples this minute across every tenant
-- (owed_history_record: $1 now, $2 the dead-letter depth or NULL, $3 how
-- many seconds of samples to keep) and answers the rows written.
SELECT owed_history_record($1, $2, $3)

-- name: KeepPartitions
-- KeepPartitions makes the ledger's partitions of this month and the two
-- after it that are missing (owed_ledger_partitions_keep,
-- sql/notifications.sql) and answers how many it made.
SELECT owed_ledger_partitions_keep()

-- name: History
-- History reads the samples from the minute $1 on, oldest first, through
-- owed_history's primary key.
SELECT minute, series, label, value FROM owed_history WHERE minute >= $1 ORDER BY minute, series, label

-- name: TableVacuum
-- TableVacuum reads the vacuum statistics of owed's tables (each
-- partition on its own): live and dead row versions, and when a vacuum,
-- manual or automatic, last finished (NULL: never since the statistics
-- were reset). The statistics views need no grant on the tables.
SELECT relname, n_live_tup, n_dead_tup, greatest(last_vacuum, last_autovacuum)
  FROM pg_stat_user_tables
 WHERE schemaname = current_schema() AND relname LIKE 'owed\_%'
 ORDER BY relname

-- Erasure (erase.go), in the caller's tenant scope.

-- name: Erase
-- Erase forgets recipient $2 of tenant $1 on channel $3 ('' every
-- channel) in one statement, so a crash erases all of it or none: the
-- recipient's ledger rows become tombstones (the recipient replaced by
-- "erased:<id>", unique per row so the schedule key holds, the payload
-- emptied, an error text that may quote the address replaced), and a
-- row still owed is cancelled first, as Cancel would, so it is never
-- sent to a tombstone. A row a worker is sending right now is left
-- alone: its send's outcome comes first and erasing again takes it. The
-- delivery facts stay: ids, kind, ref_id, times, states, attempts'
-- outcomes and HTTP statuses, provider message ids, receipts. The
-- attempts' error texts, the recipient's contacts and items, the
-- undeliverable marks of its rows and addresses, and the shared
-- payloads no other row points at are removed or replaced. The audit row
-- (owed_erasures) says who asked and what was erased, never whom. $4 who
-- asked, $5 why, $6 now. Every CTE sees the snapshot from before the
-- statement: payloads' NOT EXISTS leaves the erased rows out by id.
WITH target AS (
    SELECT id, settled_at, payload_id,
           (settled_at IS NULL AND state = 'sending' AND lease_until > coalesce($6::timestamptz, now())
            AND NOT claim_revocable) AS in_flight
      FROM owed_notifications
     WHERE tenant_id = $1 AND recipient = $2 AND ($3 = '' OR channel = $3)
     ORDER BY id FOR UPDATE
), erased AS (
    UPDATE owed_notifications n
       SET recipient = 'erased:' || n.id, payload = '{}'::jsonb, payload_id = NULL,
           last_error = CASE WHEN n.settled_at IS NULL THEN 'erased' WHEN n.last_error IS NOT NULL THEN 'erased' END,
           state = CASE WHEN n.settled_at IS NULL THEN 'cancelled' ELSE n.state END,
           settled_at = coalesce(n.settled_at, coalesce($6::timestamptz, now())),
           lease_until = CASE WHEN n.settled_at IS NULL THEN NULL ELSE n.lease_until END,
           updated_at = coalesce($6::timestamptz, now())
      FROM target t
     WHERE n.id = t.id AND NOT t.in_flight
    RETURNING n.id, t.payload_id, t.settled_at IS NULL AS cancelled
), attempts AS (
    UPDATE owed_notification_attempts a SET error = 'erased'
     WHERE a.notification_id IN (SELECT id FROM erased) AND a.error IS NOT NULL AND a.error <> 'erased'
    RETURNING 1
), contacts AS (
    DELETE FROM owed_contacts
     WHERE tenant_id = $1 AND recipient = $2 AND ($3 = '' OR channel = $3)
    RETURNING channel, address
), undeliverable AS (
    DELETE FROM owed_undeliverable u
     WHERE u.tenant_id = $1
       AND (u.notification_id IN (SELECT id FROM erased)
            OR (u.channel, u.address) IN (SELECT channel, address FROM contacts)
            OR (u.address = $2 AND ($3 = '' OR u.channel = $3)))
    RETURNING 1
), items AS (
    DELETE FROM owed_items
     WHERE tenant_id = $1 AND recipient = $2 AND ($3 = '' OR channel = $3)
    RETURNING 1
), payloads AS (
    DELETE FROM owed_event_payloads p
     WHERE p.tenant_id = $1 AND p.id IN (SELECT payload_id FROM erased)
       AND NOT EXISTS (SELECT 1 FROM owed_notifications o
                        WHERE o.tenant_id = $1 AND o.payload_id = p.id
                          AND o.id NOT IN (SELECT id FROM erased))
    RETURNING 1
), counts AS (
    SELECT coalesce((SELECT array_agg(id ORDER BY id) FROM erased), '{}'::bigint[]) AS ids,
           (SELECT count(*) FROM erased WHERE cancelled)::int AS cancelled,
           (SELECT count(*) FROM target WHERE in_flight)::int AS in_flight,
           (SELECT count(*) FROM attempts)::int AS attempts,
           (SELECT count(*) FROM contacts)::int AS contacts,
           (SELECT count(*) FROM undeliverable)::int AS undeliverable,
           (SELECT count(*) FROM items)::int AS items,
           (SELECT count(*) FROM payloads)::int AS shared_payloads
), audit AS (
    INSERT INTO owed_erasures (tenant_id, channel, requested_by, reason, at, notification_ids, cancelled, in_flight,
                               attempts, contacts, undeliverable, items, shared_payloads)
    SELECT $1, nullif($3, ''), $4, $5, coalesce($6::timestamptz, now()), ids, cancelled, in_flight, attempts,
           contacts, undeliverable, items, shared_payloads
      FROM counts
    RETURNING id
)
SELECT (SELECT id FROM audit), ids, cancelled, in_flight, attempts, contacts, undeliverable, items, shared_payloads
  FROM counts

-- Digests (digest.go): the kinds a tenant declared digestible
-- (owed_digests, sql/digests.sql), and the rows Schedule puts in a digest.

-- name: Digests
-- Digests reads one tenant's ($1) digestible kinds and their windows in
-- seconds.
SELECT kind, window_s FROM owed_digests WHERE tenant_id = $1 ORDER BY kind

-- name: UpsertDigest
-- UpsertDigest declares kind $2 of tenant $1 digestible with the window $3
-- in seconds ($4 now).
INSERT INTO owed_digests (tenant_id, kind, window_s, updated_at)
VALUES ($1, $2, $3, coalesce($4::timestamptz, now()))
ON CONFLICT (tenant_id, kind) DO UPDATE SET window_s = EXCLUDED.window_s, updated_at = EXCLUDED.updated_at

-- name: DeleteDigest
-- DeleteDigest turns digesting off for kind $2 of tenant $1.
DELETE FROM owed_digests WHERE tenant_id = $1 AND kind = $2

-- name: UndigestKind
-- UndigestKind takes the tenant's ($1) pending rows of kind $2 out of
-- their digests, each back at the due time it was asked for ($3 now): a
-- digest not yet leased is undone when its kind stops being digestible.
UPDATE owed_notifications n
   SET due_at = n.digest_from, digest_id = NULL, digest_from = NULL, updated_at = coalesce($3::timestamptz, now())
 WHERE n.tenant_id = $1 AND n.kind = $2 AND n.digest_id IS NOT NULL AND n.state = 'pending'
RETURNING n.id

-- name: DigestLock
-- DigestLock serialises the schedules that put rows in the digests of the
-- same (recipient, channel, kind): $1 are the keys' 32-bit hashes, locked
-- in order (31 is the class of these locks), so two schedules never open
-- two digests for one window.
SELECT pg_advisory_xact_lock(31, k.h) FROM (SELECT DISTINCT h FROM unnest($1::integer[]) h ORDER BY h) k

-- name: DigestReplays
-- DigestReplays finds the tenant's ($1) rows already scheduled for the
-- rows ($2 recipients, $3 kinds, $4 ref_ids, $5 the due times asked, one
-- element per row) by the due time asked: a row in a digest keeps it in
-- digest_from. It answers each found row's (1-based) place and its due_at,
-- which the replay is scheduled with so it meets the row's schedule key.
SELECT w.i, f.due_at
  FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[])
       WITH ORDINALITY AS w(recipient, kind, ref_id, due, i)
 CROSS JOIN LATERAL (SELECT n.due_at FROM owed_notifications n
                      WHERE n.tenant_id = $1 AND n.recipient = w.recipient AND n.kind = w.kind
                        AND n.ref_id = w.ref_id AND (n.digest_from = w.due OR n.due_at = w.due)
                      ORDER BY n.due_at = w.due DESC
                      LIMIT 1) f

-- name: OpenDigests
-- OpenDigests reads the tenant's ($1) open digests of each (recipient $2,
-- channel $3, kind $4): a digest none of whose owed members has been
-- leased yet, and whose members share one send time. It answers the
-- (1-based) place of the key, the digest's id, its send time, the
-- earliest and latest due times its members asked for, and their ref_ids.
SELECT w.i, d.digest_id, d.send_at, d.opens, d.latest, d.refs
  FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS w(recipient, channel, kind, i)
 CROSS JOIN LATERAL (
    SELECT n.digest_id, min(n.due_at) AS send_at, min(n.digest_from) AS opens, max(n.digest_from) AS latest,
           array_agg(n.ref_id) AS refs
      FROM owed_notifications n
     WHERE n.tenant_id = $1 AND n.recipient = w.recipient AND n.kind = w.kind AND n.channel = w.channel
       AND n.digest_id IS NOT NULL AND n.settled_at IS NULL
     GROUP BY n.digest_id
    HAVING bool_and(n.state = 'pending') AND min(n.due_at) = max(n.due_at)) d

-- name: JoinDigests
-- JoinDigests names the digest ($3 ids) of each row just scheduled ($2
-- ids, one element per row) in the tenant's ($1) scope.
UPDATE owed_notifications n SET digest_id = x.digest_id
  FROM unnest($2::bigint[], $3::bigint[]) AS x(id, digest_id)
 WHERE n.tenant_id = $1 AND n.id = x.id AND n.digest_from IS NOT NULL

-- name: MoveDigest
-- MoveDigest brings the pending members of the tenant's ($1) digest $2
-- forward to the send time $3 ($4 now): a member's expiry falls before
-- the window closes.
UPDATE owed_notifications n SET due_at = $3, updated_at = coalesce($4::timestamptz, now())
 WHERE n.tenant_id = $1 AND n.digest_id = $2 AND n.state = 'pending'

-- name: DigestMembers
-- DigestMembers lists the owed members of the tenant's ($1) digest $2
-- whose due time is the digest's send time $3, by id: what the worker
-- claims for one digest message.
SELECT id FROM owed_notifications
 WHERE tenant_id = $1 AND digest_id = $2 AND due_at = $3 AND settled_at IS NULL
 ORDER BY id

-- name: SweepDigests
-- SweepDigests answers which of the rows the sweep leased ($1 ids) are in
-- a digest, and its id (owed_sweep_digests, sql/digests.sql).
SELECT id, digest_id FROM owed_sweep_digests($1)
