-- The ledger: one row per owed notification. A row is owed until it
-- settles, and its state says where it is on the way:
--
--   pending    scheduled; the sweep leases it once it is due (or within
--              the publish-ahead window, OWED_PUBLISH_AHEAD).
--   leased     the sweep holds it while it publishes the row's message.
--   queued     published; a worker's claim takes it when the message
--              arrives. lease_until is when the sweep republishes it.
--   sending    a worker holds its claim (claim_seq is the claim's token)
--              until lease_until, which the worker's heartbeat moves on.
--   delivered, skipped, expired, failed, cancelled: settled, for good
--              (failed until an operator's redrive reopens it).
--
-- The table is FORCE ROW LEVEL SECURITY: the runtime role and applications
-- see only the tenant named by the transaction-local setting
-- owed.tenant_id; statements across tenants are the SECURITY DEFINER
-- functions of sweep.sql and operator.sql.
-- owed_time_in_range says whether a time is one every reader of the ledger
-- can hold (NULL is): the years 0001 to 9999 in UTC, finite, never BC. It is
-- what Go's time values, the queue's JSON envelope and every API answer can
-- carry (ledger.checkTime refuses the rest at the API). The CHECK
-- constraints of owed_notifications below hold its range, so no writer, an
-- application's SQL included, can store a time that would fail a statement
-- or a scan shared with other rows: before, one due_at of -infinity failed
-- every cron run's survey, a BC due_at made the sweep report a stall
-- forever, and an expires_at of infinity kept a row failing its claim.
-- They spell the range out rather than call this function: a function in
-- a CHECK is inlined, its body parsed again, in every statement that
-- writes the table, and the sixteen calls cost each UPDATE of a row about
-- 0.3 ms (a third of a one-row update; migration 00085).
CREATE FUNCTION owed_time_in_range(p_at timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT p_at IS NULL OR p_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
$$;

-- owed_tenant_scope names the tenants in the caller's scope: the tenant
-- named by the transaction-local setting owed.tenant_id, and the tenants of
-- owed.tenant_ids (a text array literal). Every statement but the worker's
-- batches sets the first, one tenant at a time. A worker's batch
-- (owed_claim_many, owed_extend_many, owed_settle_delivered_many, claim.sql
-- and settle.sql) names every tenant of its rows in the second, so one
-- set-based statement serves them all, and still matches each row with the
-- tenant its message named: a row of a tenant the batch did not name stays
-- invisible. Setting either is what the runtime role can do already, tenant
-- by tenant, so the set grants nothing the role did not have. An unset or
-- emptied setting (NULL, or '' once set elsewhere in the session) names no
-- tenant.
--
-- The policies test a row with tenant_id = ANY ((SELECT owed_tenant_scope())
-- ::text[]): the sub-select is an init plan, so a statement reads and parses
-- the settings once, not for every row it looks at. Written as a function of
-- the row's tenant, as before, the array literal was parsed for each row (a
-- tenth of a worker batch's CPU at 200 rows a batch).
CREATE FUNCTION owed_tenant_scope() RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT ARRAY[current_setting('owed.tenant_id', true)]
       || nullif(current_setting('owed.tenant_ids', true), '')::text[]
$$;

-- owed_handed_back says whether a row is a wait a worker handed back to the
-- ledger (ledger.HandBack): queued, its lease ending at its not_before, no
-- message of it anywhere. A lease the sweep or a claim takes moves
-- lease_until and the state on, so no other row answers true. It is
-- inlined into the statements that call it (the sweep's, a trigger's).
CREATE FUNCTION owed_handed_back(p_state text, p_lease_until timestamptz, p_not_before timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT p_state = 'queued' AND p_not_before = p_lease_until
$$;

-- owed_unpublished says whether a row is as the sweep's lease left it,
-- its message not yet published (or its publish not yet answered): leased,
-- or a pending row the lease wrote queued (owed_sweep_fair_lease_sql),
-- whose publish instant is still its last write's. Any later write of
-- the row (a worker's claim or hand-back, the queued mark) moves
-- updated_at on, or leaves a published row. The sweep hands back or sets
-- aside only such rows (owed_sweep_release, owed_sweep_set_aside), and a
-- row handed back from it wakes nobody (owed_notifications_due_updated).
CREATE FUNCTION owed_unpublished(p_state text, p_published_at timestamptz, p_updated_at timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT p_state = 'leased' OR (p_state = 'queued' AND p_published_at IS NOT DISTINCT FROM p_updated_at)
$$;

-- The ledger is partitioned by ranges of its id, each range opened for one
-- calendar month (owed_ledger_partitions_ensure, below): every row created
-- in a month gets an id of that month's range, so the id ranges are time
-- partitions, and retention drops a month whole. The key is the id, not
-- created_at or due_at: every statement of the hot path names rows by id
-- (arrays of ids), which prunes to one partition, the primary key and the
-- foreign keys stay the id alone, and neither a row's id nor its creation
-- ever changes, while its due time can (a reschedule). docs/scale.md has
-- the whole design.
CREATE TABLE owed_notifications (
    id                  bigint      GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME owed_notifications_id_seq) PRIMARY KEY,
    -- Text bounds count bytes, as the Go validators and the queue envelope
    -- do (tenant.MaxLength is 128): length() counts characters, so a value
    -- of multibyte characters would pass the table and fail every caller.
    tenant_id           text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    recipient           text        NOT NULL CHECK (recipient <> '' AND octet_length(recipient) <= 512),
    channel             text        NOT NULL CHECK (channel <> '' AND octet_length(channel) <= 64),
    kind                text        NOT NULL CHECK (kind <> '' AND octet_length(kind) <= 128),
    ref_id              text        NOT NULL CHECK (ref_id <> '' AND octet_length(ref_id) <= 256),
    due_at              timestamptz NOT NULL,
    expires_at          timestamptz CHECK (expires_at IS NULL OR expires_at > due_at),
    -- The row's own payload, or NULL when the row points at a payload of
    -- owed_event_payloads that many rows of one event share (payload_id
    -- below). Every reader reads coalesce(own, shared). The bound measures
    -- the stored form, which payload.Canonical computes in Go.
    payload             jsonb       DEFAULT '{}'::jsonb CHECK (octet_length(payload::text) <= 65536),
    state               text        NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'leased', 'queued', 'sending',
                                         'delivered', 'skipped', 'expired', 'failed', 'cancelled')),
    attempts            integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    lease_until         timestamptz,
    claimed_at          timestamptz,
    published_at        timestamptz,
    delivered_at        timestamptz,
    settled_at          timestamptz,
    provider            text,
    provider_message_id text,
    last_error          text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    -- Counts the deliberate republishes of the row: the sweep's requeue of
    -- a row published before (its message was lost and its lease ran out),
    -- a reschedule, an operator's redrive. The queue message's key is the
    -- row's provider idempotency key plus this (ledger.QueueKey), so a queue
    -- that deduplicates by key never drops a republish as a copy of the
    -- message it replaces; the provider's key stays the row's own.
    queue_generation    integer     NOT NULL DEFAULT 0 CHECK (queue_generation >= 0),
    -- The fencing token: owed_claim adds one each time it takes the row
    -- and hands the new value to its worker. Every later write of that
    -- worker names the token and changes the row only while the token is
    -- still the row's (internal/ledger/fence.go), so a worker whose lease
    -- ran out while it stalled cannot undo another worker's claim.
    claim_seq           bigint      NOT NULL DEFAULT 0,
    -- An intent: a cancel or a reschedule (snooze) that landed while a
    -- worker held the row's claim, recorded here and applied when the row
    -- leaves sending (owed_apply_intent, intents.sql), so the answer the
    -- caller got holds whatever the send does next. intent_outcome says
    -- how it was resolved; NULL while it waits.
    intent              text,
    intent_due_at       timestamptz,
    intent_expires_at   timestamptz,
    intent_at           timestamptz,
    intent_outcome      text,
    -- The shared payload (owed_event_payloads, by tenant_id and this id).
    -- There is no foreign key: the ledger writes a payload and its rows in
    -- one transaction and deletes a payload no row took (a replayed event),
    -- and a foreign key would make that delete scan the ledger for want of
    -- an index on payload_id.
    payload_id          bigint,
    -- The row's confirmed outcome: the governing receipt's status, code and
    -- time (owed_receipt_record, receipts.sql). A receipt never changes the
    -- row's state: a bounce after "accepted" leaves the row delivered.
    receipt_status      text        CHECK (receipt_status IN ('sent', 'deferred', 'delivered', 'bounced', 'failed')),
    receipt_code        text        CHECK (octet_length(receipt_code) <= 256),
    confirmed_at        timestamptz,
    -- A nudge the materialiser wrote (or found at the time an item asks
    -- for) for the owed_items row of the same (tenant_id, recipient, kind,
    -- ref_id). It tells a nudge that follows its item from a row an
    -- application scheduled through the API for the same subject, which the
    -- materialiser never changes.
    materialised        boolean     NOT NULL DEFAULT false,
    -- While the row is sending: its claim is revocable, since its worker has
    -- not started the send yet (owed_claim's p_revocable, claim.sql). A
    -- cancel or reschedule takes such a row back from its claim at once, as
    -- it does an open row, and the worker's check before the send
    -- (owed_extend_claims with start_send) then finds the claim gone and
    -- sends nothing; that check makes the claim irrevocable, after which a
    -- change waits on the send as an intent (intents.sql). Meaningless in
    -- any other state: every claim sets it.
    claim_revocable     boolean     NOT NULL DEFAULT false,
    -- The instant before which the row is not to be sent: a wait a worker
    -- handed back to the ledger (a retry's step, a 429's Retry-After, a
    -- paused account or tenant) instead of parking its message in the
    -- queue (ledger.HandBack). While the row waits it is queued with
    -- lease_until equal to it and no message anywhere, so it counts against
    -- no account's cap (owed_sweep_in_flight); the fair lease takes it
    -- once it falls within the publish-ahead horizon, and its message is
    -- published to surface at it (owed_sweep_fair_lease_sql). A row leased
    -- from pending has none.
    not_before          timestamptz,
    -- The recipient's IANA time zone, when the row was scheduled in one
    -- (internal/localtime): the zone due_local is read in. The bound is
    -- localtime.MaxZoneLen; the name itself is checked in Go, against the
    -- tz database the ledger resolves with, which the database's own may
    -- not match.
    time_zone           text        CHECK (time_zone <> '' AND octet_length(time_zone) <= 64),
    -- The wall-clock time in time_zone the row was scheduled for, as the
    -- caller asked it; due_at is the instant it resolved to (the two differ
    -- from a naive reading only in a daylight-saving gap). A move by
    -- instant (a reschedule, an intent applied) clears it, since the
    -- local time asked no longer says when the row is due.
    due_local           timestamp,
    -- An update waiting on a send (intent 'update', intents.sql): the new
    -- payload, in the stored form, or NULL when the update keeps the
    -- payload; and the local time of its due time, when it was given as
    -- one.
    intent_payload      jsonb       CHECK (octet_length(intent_payload::text) <= 65536),
    intent_due_local    timestamp,
    -- A row held for quiet hours (quiet_hours.sql): the due time it was
    -- asked for, due_at being the window's opening it waits for. NULL for
    -- a row not held.
    held_from           timestamptz CHECK (held_from BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'),
    -- An urgent row is never held.
    urgent              boolean     NOT NULL DEFAULT false,
    -- A row in a digest (digests.sql): the digest it belongs to (the id of
    -- its first member), and the due time it was asked for, due_at being
    -- the digest's send time. NULL for a row sent alone.
    digest_id           bigint,
    digest_from         timestamptz CHECK (digest_from BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'),
    -- A reschedule or update waiting on a send (intents.sql) that quiet
    -- hours hold: the due time it asked for, intent_due_at being the
    -- window's opening, as held_from is for the row. The ledger works it
    -- out in Go when it records the intent and again when the windows
    -- change (ledger.rehold), so the trigger that applies the intent only
    -- copies it. An expiry at or before that opening makes the row expire
    -- unsent when the intent applies, as a pending row would.
    intent_held_from    timestamptz CHECK (intent_held_from BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'),
    -- An update's zone, when it gave one (with a local time): the zone
    -- intent_due_local is read in, which the row takes with the update.
    intent_time_zone    text        CHECK (intent_time_zone <> '' AND octet_length(intent_time_zone) <= 64),
    -- Scheduling the same thing twice is one row: owed_notification_keys
    -- (below) holds the key across partitions, since a unique index of a
    -- partitioned table must hold its partition key. This one, the key
    -- with the id, enforces nothing the id does not; it is kept so that
    -- the previous release's statements, which name it in ON CONFLICT ON
    -- CONSTRAINT (Schedule in internal/ledger/sql/queries.sql and
    -- owed_apply_intent), still run: with the keys' trigger skipping a
    -- taken key, they do what they did.
    CONSTRAINT owed_notifications_schedule_key UNIQUE (tenant_id, recipient, kind, ref_id, due_at, id),
    -- settled_at is set exactly when the state is final, so the partial
    -- indexes can use it as "still owed".
    CONSTRAINT owed_notifications_settled_state CHECK (
        (settled_at IS NOT NULL) = (state IN ('delivered', 'skipped', 'expired', 'failed', 'cancelled'))),
    -- A delivered row always says when.
    CONSTRAINT owed_notifications_delivered_at CHECK (state <> 'delivered' OR delivered_at IS NOT NULL),
    CONSTRAINT owed_notifications_payload_present CHECK (payload IS NOT NULL OR payload_id IS NOT NULL),
    CONSTRAINT owed_notifications_intent_kind CHECK (intent IN ('cancel', 'reschedule', 'update')),
    -- refused: an intent the ledger could not apply (it named a time the
    -- ledger cannot hold, written before these bounds existed, or applying
    -- it failed); the send's own outcome stands and last_error says why.
    CONSTRAINT owed_notifications_intent_outcome
        CHECK (intent_outcome IN ('applied', 'too_late', 'new_row', 'superseded', 'refused')),
    -- Every time a row holds is one every reader can hold
    -- (owed_time_in_range, spelled out): the scheduling times each by name,
    -- so a writer's error names the column, and the bookkeeping times
    -- together. A NULL passes, as a CHECK lets it.
    CONSTRAINT owed_notifications_due_at_in_range CHECK (due_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'),
    CONSTRAINT owed_notifications_expires_at_in_range CHECK (expires_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'),
    CONSTRAINT owed_notifications_intent_due_at_in_range CHECK (intent_due_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'),
    CONSTRAINT owed_notifications_intent_expires_at_in_range CHECK (intent_expires_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'),
    CONSTRAINT owed_notifications_not_before_in_range CHECK (not_before BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'),
    CONSTRAINT owed_notifications_times_in_range CHECK (
        (lease_until BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (claimed_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (published_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (delivered_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (settled_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (created_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (updated_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (intent_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')),
    -- A reschedule waiting on a send is one the row can take when the send
    -- ends, as expires_at > due_at is for the row itself: before, a move to
    -- 9999-12-31T23:59:59.999999Z clamped the shifted expiry onto the due
    -- time, and applying it failed every shared batch that touched the row.
    -- A held intent's expiry is after the time asked; one at or before the
    -- opening expires the row (intent_held_from).
    CONSTRAINT owed_notifications_intent_expiry
        CHECK (intent_expires_at IS NULL OR intent_expires_at > coalesce(intent_held_from, intent_due_at)),
    -- An intent says when it was made and, for a reschedule, where to;
    -- only a recorded intent has an outcome.
    CONSTRAINT owed_notifications_intent_recorded CHECK (
        (intent IS NULL) = (intent_at IS NULL)
        AND (intent IS NOT NULL OR intent_outcome IS NULL)
        AND (intent IS DISTINCT FROM 'reschedule' OR intent_due_at IS NOT NULL)),
    -- An intent still waiting sits on a row being sent: the trigger
    -- resolves it on every way out of sending.
    CONSTRAINT owed_notifications_intent_waits_on_send
        CHECK (intent IS NULL OR intent_outcome IS NOT NULL OR state = 'sending'),
    -- A local time is read in a zone.
    CONSTRAINT owed_notifications_due_local_zone CHECK (due_local IS NULL OR time_zone IS NOT NULL)
) PARTITION BY RANGE (id);

-- What the sweep's lease reads: owed rows, oldest first. Settled rows leave
-- the index, so the lease costs what is owed, not what the ledger holds.
-- The id after due_at lets a run of lease slices resume from a (due_at, id)
-- cursor: without it a burst of rows sharing one due time (an event fanned
-- out to every subscriber) made each slice step again over every row the
-- run had already leased.
CREATE INDEX owed_notifications_owed_due ON owed_notifications (due_at, id) WHERE settled_at IS NULL;

-- What the fair lease reads (owed_sweep_fair_lease_sql, sweep.sql): the
-- pending rows of each tenant and channel, oldest owed first, a row being
-- owed since greatest(due_at, created_at). The lease skips from one
-- (tenant, channel) to the next through it, and reads each one's rows owed
-- by the horizon from its start, so a slice costs what it looks at, never
-- the backlog. Only pending rows are in it: a leased, queued or sending row
-- is never stepped over.
CREATE INDEX owed_notifications_pending_owed ON owed_notifications
    (tenant_id, channel, greatest(due_at, created_at), due_at, id) WHERE state = 'pending';

-- The rows a lease holds (leased, queued, sending), by the lease's end:
-- the fair lease counts the work in flight of each account and tenant from
-- its live part (owed_sweep_in_flight) and takes the rows whose lease ran
-- out from its past part, so both cost the rows in flight.
CREATE INDEX owed_notifications_in_flight ON owed_notifications (lease_until)
    WHERE state IN ('leased', 'queued', 'sending');

-- A digest's owed members, which the worker claims together
-- (ledger.ClaimDigest).
CREATE INDEX owed_notifications_digest ON owed_notifications (tenant_id, digest_id)
    WHERE digest_id IS NOT NULL AND settled_at IS NULL;

-- The expiry pass reads owed rows that carry an expiry, soonest first.
CREATE INDEX owed_notifications_owed_expiry ON owed_notifications (expires_at)
    WHERE settled_at IS NULL AND expires_at IS NOT NULL;

-- Operator and API look-ups: "was this recipient notified about this ref".
CREATE INDEX owed_notifications_tenant_ref ON owed_notifications (tenant_id, ref_id);

-- The keyset read behind GET /v1/notifications' cursor (ledger.FindPage):
-- one tenant's rows, newest due first, from a (due_at, id) position, so
-- page 1,000 costs what page 1 does.
CREATE INDEX owed_notifications_tenant_due ON owed_notifications (tenant_id, due_at, id);

-- What the materialiser's reconciliation reads: its nudges still owed, by
-- expiry, so its cost follows the nudges, not the ledger.
CREATE INDEX owed_notifications_materialised_owed ON owed_notifications (expires_at)
    WHERE materialised AND settled_at IS NULL;

-- The rows pointing at a shared payload, so an erasure (ledger.Erase)
-- removes a shared payload no other row points at without reading the
-- tenant's whole ledger. Only rows of an event are in it.
CREATE INDEX owed_notifications_payload ON owed_notifications (tenant_id, payload_id) WHERE payload_id IS NOT NULL;

-- What the operators' aggregates read (owed_ledger_stats and
-- owed_ledger_receipt_stats, operator.sql and receipts.sql): the rows
-- settled since a time. Without it each call scanned the whole ledger (a
-- parallel sequential scan, about 16 GB at 100 million rows, twice per
-- dashboard load); with it a call costs the rows of its window. The
-- included columns never change once a row settles, so the stats read the
-- index alone where the visibility map allows, and a receipt's later update
-- of the row (receipt_status, confirmed_at) still leaves this index alone.
CREATE INDEX owed_notifications_settled ON owed_notifications (settled_at) INCLUDE (state, due_at, delivered_at)
    WHERE settled_at IS NOT NULL;

ALTER TABLE owed_notifications ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_notifications FORCE ROW LEVEL SECURITY;

-- An unscoped statement matches no row (owed_tenant_scope). The runtime
-- role names any tenant; the comparison is all its statements pay per row. The worker's batches read and write rows of every tenant they
-- name, their intents' new rows included.
CREATE POLICY owed_notifications_tenant ON owed_notifications TO owed_runtime
    USING (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]))
    WITH CHECK (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]));
-- An owed_apps login sees and writes only a tenant it names and is bound
-- to (owed_apps_tenant, internal/apps/sql/logins.sql).
CREATE POLICY owed_notifications_apps ON owed_notifications TO owed_apps
    USING (tenant_id = (SELECT owed_apps_tenant()))
    WITH CHECK (tenant_id = (SELECT owed_apps_tenant()));
-- The migrating role owns the table and is exempt (roles.sql says why).
CREATE POLICY owed_notifications_owner ON owed_notifications TO CURRENT_USER USING (true) WITH CHECK (true);
-- The SECURITY DEFINER functions read and write across tenants; INSERT is
-- for owed_apply_intent, which a sweep's update of a row with a
-- reschedule waiting fires.
CREATE POLICY owed_notifications_definer ON owed_notifications TO owed_definer USING (true) WITH CHECK (true);

-- Rows are settled, never deleted, so nobody is granted DELETE.
GRANT SELECT, INSERT, UPDATE ON owed_notifications TO owed_runtime, owed_definer;

-- An application writing SQL (owed_apps) writes owed rows only: it
-- inserts the columns of a row to schedule, so the row starts pending with
-- no lease, claim, publish or attempt of its own, and it may change a
-- pending row's schedule or payload, or cancel it (the policy below). It
-- cannot make a row leased, queued or sending, so it can never fake work
-- in flight that would hold the sweep's capacity (an application's 200
-- rows queued with lease_until 9999-01-01 held every sweep back), nor
-- touch a row the sweep or a worker holds: a change of those goes through
-- the API, which records an intent on a row being sent.
GRANT SELECT ON owed_notifications TO owed_apps;
GRANT INSERT (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at, payload, time_zone, due_local)
    ON owed_notifications TO owed_apps;
GRANT UPDATE (due_at, expires_at, payload, state, settled_at, last_error, updated_at, time_zone, due_local)
    ON owed_notifications TO owed_apps;
CREATE POLICY owed_notifications_apps_pending ON owed_notifications AS RESTRICTIVE FOR UPDATE TO owed_apps
    USING (state = 'pending')
    WITH CHECK (state IN ('pending', 'cancelled'));

-- The schedule key across partitions: one row per ledger row, kept by the
-- trigger below on every insert and every change of the key, so no caller
-- writes it. An insert whose key is taken is skipped (what ON CONFLICT DO
-- NOTHING did for the unique key of the unpartitioned table: the API's
-- idempotent schedule, an intent's new row, an application's own insert),
-- and a change onto a taken key fails with unique_violation, which
-- Reschedule and Update answer as a conflict. Nobody but the trigger's
-- owner reads or writes it: its rows name recipients of every tenant.
-- Retention deletes a dropped month's keys by notification_id.
CREATE TABLE owed_notification_keys (
    tenant_id       text        NOT NULL,
    recipient       text        NOT NULL,
    kind            text        NOT NULL,
    ref_id          text        NOT NULL,
    due_at          timestamptz NOT NULL,
    notification_id bigint      NOT NULL,
    CONSTRAINT owed_notification_keys_pkey PRIMARY KEY (tenant_id, recipient, kind, ref_id, due_at)
);
CREATE UNIQUE INDEX owed_notification_keys_notification ON owed_notification_keys (notification_id);

ALTER TABLE owed_notification_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_notification_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY owed_notification_keys_definer ON owed_notification_keys TO owed_definer USING (true) WITH CHECK (true);
CREATE POLICY owed_notification_keys_owner ON owed_notification_keys TO CURRENT_USER USING (true) WITH CHECK (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON owed_notification_keys TO owed_definer;

-- owed_notification_key_keep keeps a row's owed_notification_keys row. It
-- runs as owed_definer, so the roles that write the ledger need no grant
-- on the keys. Nobody is granted DELETE on the ledger, but the owner's
-- fixtures and repairs delete rows, and their keys go with them; a
-- dropped partition fires no trigger, so retention deletes its keys
-- itself. ON CONFLICT without a target also skips a row whose id has
-- a key already (an archive's restore of a row that is there). A change
-- writes the row's key whether or not it had one, so a key the upgrade's
-- backfill has not reached yet is right once it does. The upgrade also
-- fires it AFTER each write of the unpartitioned table while it backfills
-- the keys (docs/upgrade.md), when the table's own unique key still
-- decides and the row is never skipped here.
CREATE FUNCTION owed_notification_key_keep() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO owed_notification_keys (tenant_id, recipient, kind, ref_id, due_at, notification_id)
        VALUES (NEW.tenant_id, NEW.recipient, NEW.kind, NEW.ref_id, NEW.due_at, NEW.id)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND AND TG_WHEN = 'BEFORE' THEN
            RETURN NULL;
        END IF;
        RETURN NEW;
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM owed_notification_keys WHERE notification_id = OLD.id;
        RETURN OLD;
    END IF;
    INSERT INTO owed_notification_keys (tenant_id, recipient, kind, ref_id, due_at, notification_id)
    VALUES (NEW.tenant_id, NEW.recipient, NEW.kind, NEW.ref_id, NEW.due_at, OLD.id)
    ON CONFLICT (notification_id) DO UPDATE
       SET tenant_id = excluded.tenant_id, recipient = excluded.recipient, kind = excluded.kind,
           ref_id = excluded.ref_id, due_at = excluded.due_at;
    RETURN NEW;
END
$$;
ALTER FUNCTION owed_notification_key_keep() OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_notification_key_keep() FROM PUBLIC;

-- The triggers are named to fire after every other BEFORE trigger of the
-- ledger (they fire in name order), so the key they keep is the row's
-- final one: owed_apply_default_grace may expire a row, owed_apply_intent
-- may move it. The update's WHEN clause is tested without calling the
-- function, so the hot path's updates, which never change the key, cost
-- nothing.
CREATE TRIGGER owed_notifications_key_insert
    BEFORE INSERT ON owed_notifications
    FOR EACH ROW
    EXECUTE FUNCTION owed_notification_key_keep();
CREATE TRIGGER owed_notifications_key_update
    BEFORE UPDATE ON owed_notifications
    FOR EACH ROW
    WHEN ((NEW.tenant_id, NEW.recipient, NEW.kind, NEW.ref_id, NEW.due_at)
          IS DISTINCT FROM (OLD.tenant_id, OLD.recipient, OLD.kind, OLD.ref_id, OLD.due_at))
    EXECUTE FUNCTION owed_notification_key_keep();
CREATE TRIGGER owed_notifications_key_delete
    AFTER DELETE ON owed_notifications
    FOR EACH ROW
    EXECUTE FUNCTION owed_notification_key_keep();

-- owed_ledger_month_first_id is the first id of the range of p_month's
-- month: 10^11 ids a month, counted from January 2000. A month of
-- 10 million rows a day uses 3 * 10^8 of them, and bigint holds the
-- ranges of 7 million years.
CREATE FUNCTION owed_ledger_month_first_id(p_month date) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT ((extract(year FROM p_month)::bigint - 2000) * 12 + extract(month FROM p_month)::bigint - 1) * 100000000000
$$;

-- owed_ledger_partitions lists the partitions of the ledger's three
-- partitioned tables (owed_notifications, owed_notification_attempts and
-- owed_receipts, on the same ranges) with their id ranges (from_id NULL for
-- the legacy partition's open start: the table an upgrade attached,
-- docs/upgrade.md), the rows the planner estimates and the bytes on disk,
-- oldest range first. The catalog is the one record of the ranges.
CREATE FUNCTION owed_ledger_partitions()
RETURNS TABLE (parent text, partition text, from_id bigint, to_id bigint, est_rows bigint, bytes bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
SELECT p.relname::text,
       c.relname::text,
       nullif(b[1], 'MINVALUE')::bigint,
       nullif(b[2], 'MAXVALUE')::bigint,
       greatest(c.reltuples, 0)::bigint,
       pg_total_relation_size(c.oid)
  FROM pg_inherits i
  JOIN pg_class p ON p.oid = i.inhparent
  JOIN pg_class c ON c.oid = i.inhrelid
 CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                 'FROM \(''?([^'')]+)''?\) TO \(''?([^'')]+)''?\)') AS b
 WHERE i.inhparent IN (to_regclass('owed_notifications'), to_regclass('owed_notification_attempts'),
                       to_regclass('owed_receipts'))
 ORDER BY 3 NULLS FIRST, array_position(ARRAY['owed_notifications', 'owed_notification_attempts', 'owed_receipts'],
                                        p.relname::text)
$$;
REVOKE EXECUTE ON FUNCTION owed_ledger_partitions() FROM PUBLIC;

-- owed_ledger_partition_name_indexes names each index of partition
-- p_partition after the parent's index it is a partition of, with p_suffix
-- (owed_notifications_pending_owed_y2026m12), so a plan names the index the
-- home defines whichever month it reads (PostgreSQL names a partition's
-- indexes after their columns).
CREATE FUNCTION owed_ledger_partition_name_indexes(p_partition text, p_suffix text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.relname AS index_name, p.relname AS parent_name
               FROM pg_index x
               JOIN pg_class c ON c.oid = x.indexrelid
               JOIN pg_inherits i ON i.inhrelid = x.indexrelid
               JOIN pg_class p ON p.oid = i.inhparent
              WHERE x.indrelid = to_regclass('public.' || quote_ident(p_partition)) LOOP
        EXECUTE format('ALTER INDEX public.%I RENAME TO %I', r.index_name, r.parent_name || '_' || p_suffix);
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION owed_ledger_partition_name_indexes(text, text) FROM PUBLIC;

-- owed_ledger_partitions_ensure creates the partitions of p_now's month
-- and of the p_ahead months after it that do not exist yet, of the ledger,
-- its attempts and its receipts on the same range, each with the storage
-- settings below, row-level security forced and no grant (every role
-- reads and writes them through their parent, whose policies and grants
-- are the only ones that apply; a partition named directly is refused to
-- all but its owner), and moves the ledger's id sequence to the start of
-- p_now's month's range, never backwards. Rows take ids of the range the
-- sequence is in, so a month whose partition was never made (no
-- maintenance ran) only leaves its rows in the month before: an insert
-- never lacks a partition. It runs as the schema's owner (owedctl
-- partitions ensure, the migrations): creating a partition takes the
-- table's ownership, which no service holds.
--
-- Storage, per partition (a partitioned table has none of its own). The
-- ledger's: autovacuum for the churn. A row is written about five times on
-- its way (insert, lease, publish, claim, settle), leaving four dead
-- versions, and the lease's partial indexes keep pointing at a settled
-- row's versions until a vacuum removes them: after 300,000 rows settled
-- the first lease read 9,776 buffers (48.5 ms) and 2.1 ms after a VACUUM.
-- The default trigger, 20% of the table dead, waits for 20 million dead
-- versions at 100 million rows; 1% plus 10,000 vacuums a 10-million-a-day
-- ledger every few minutes, each pass short. Inserts trigger a vacuum at
-- 1% too, so the visibility map stays current for the index-only reads,
-- and analyze follows at 1% so the planner sees a month's new rows the day
-- they come. A row is updated four to five times on its way (lease, queued
-- mark, claim, the check before the send, settle) and inserted densely:
-- the room each page keeps (fillfactor 80) lets an update whose indexed
-- columns stay as they were (the check right after a claim,
-- owed_extend_many) be HOT, a new version on the same page and no new
-- index entries, and lets the others' new versions land beside the old.
-- The attempts': they are inserted and rarely changed, so vacuum comes for
-- inserts alone, by default at 20% of the table: at 100 million attempts,
-- 20 million rows to mark all-visible and freeze in one pass. At 1% each
-- pass is small, the freezing is spread out instead of arriving as one
-- anti-wraparound scan, and analyze follows at 1% so the planner sees the
-- day's attempts the day they come (the stats read them by finished_at).
CREATE FUNCTION owed_ledger_partitions_ensure(p_now timestamptz, p_ahead integer)
RETURNS TABLE (partition_name text, first_id bigint, end_id bigint, created boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    v_month date := date_trunc('month', p_now AT TIME ZONE 'UTC')::date;
    v_at date;
    v_from bigint;
    v_to bigint;
    v_last bigint;
    v_table text;
    v_seq text := pg_get_serial_sequence('owed_notifications', 'id');
    v_member boolean := pg_has_role(current_user, 'owed_definer', 'MEMBER');
BEGIN
    IF p_ahead IS NULL OR p_ahead < 0 OR p_ahead > 24 THEN
        RAISE EXCEPTION 'owed_ledger_partitions_ensure: p_ahead %: want 0 to 24 months', p_ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Two runs at once would race to create the same partition.
    PERFORM pg_advisory_xact_lock(hashtext('owed_ledger_partitions_ensure'));
    -- A partition made or attached takes a copy of each of its parent's
    -- triggers, which checks EXECUTE on the trigger's function: owed_definer's
    -- (revoked from PUBLIC), so the owner holds the role for the call alone,
    -- as owed_definer_takes_functions does (roles.sql).
    IF NOT v_member THEN
        GRANT owed_definer TO CURRENT_USER;
    END IF;
    FOR i IN 0 .. p_ahead LOOP
        v_at := (v_month + make_interval(months => i))::date;
        v_from := owed_ledger_month_first_id(v_at);
        v_to := v_from + 100000000000;
        FOREACH v_table IN ARRAY ARRAY['owed_notifications', 'owed_notification_attempts', 'owed_receipts'] LOOP
            partition_name := v_table || '_' || to_char(v_at, '"y"YYYY"m"MM');
            first_id := v_from;
            end_id := v_to;
            created := false;
            -- A range a partition covers already (the legacy partition of
            -- an upgrade reaches to its month's start) is left as it is.
            IF NOT EXISTS (SELECT 1 FROM owed_ledger_partitions() p
                            WHERE p.parent = v_table
                              AND coalesce(p.from_id < v_to, true) AND coalesce(p.to_id > v_from, true)) THEN
                EXECUTE format('CREATE TABLE public.%I PARTITION OF public.%I FOR VALUES FROM (%s) TO (%s)',
                               partition_name, v_table, v_from, v_to);
            PERFORM owed_ledger_partition_name_indexes(partition_name, to_char(v_at, '"y"YYYY"m"MM'));
                IF v_table = 'owed_notifications' THEN
                    EXECUTE format('ALTER TABLE %I SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, '
                                   'autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0.01, '
                                   'autovacuum_analyze_scale_factor = 0.01)', partition_name);
                ELSIF v_table = 'owed_notification_attempts' THEN
                    EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_insert_scale_factor = 0.01, '
                                   'autovacuum_analyze_scale_factor = 0.01)', partition_name);
                END IF;
                EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', partition_name);
                EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', partition_name);
                created := true;
            END IF;
            RETURN NEXT;
        END LOOP;
    END LOOP;
    EXECUTE format('SELECT last_value FROM %s', v_seq) INTO v_last;
    v_from := owed_ledger_month_first_id(v_month);
    IF v_last < v_from AND (SELECT count(*) FROM owed_ledger_partitions() p
                             WHERE coalesce(p.from_id <= v_from, true) AND p.to_id > v_from) = 3 THEN
        PERFORM setval(v_seq, v_from, false);
    END IF;
    IF NOT v_member THEN
        REVOKE owed_definer FROM CURRENT_USER;
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION owed_ledger_partitions_ensure(timestamptz, integer) FROM PUBLIC;

-- owed_ledger_partitions_keep is the sweeper's monthly maintenance
-- (ledger.Sweep.KeepPartitions, on the first cron call of each hour): it
-- makes the partitions of this month and of the two after it that are
-- missing and moves the ids to this month's range
-- (owed_ledger_partitions_ensure), so a deployment where no operator ever
-- runs `owedctl partitions ensure` still gives each month its own
-- partitions. Creating a partition takes the parent's ownership, which no
-- runtime role has and owed_definer has not either, so it is the one
-- SECURITY DEFINER function owned by the schema's owner (owed_definer_takes_functions
-- leaves it so). It takes no argument: the month is the database's own
-- clock's, the reach two months, so a caller can make it do only what the
-- hourly maintenance does. Creating a partition locks its parent against
-- every statement for a moment; the wait for that lock is cut at a second
-- (a long transaction on the ledger), and a call that gives up fails,
-- changes nothing and is tried again the next hour, two months before the
-- partition is needed. It answers how many partitions it made.
CREATE FUNCTION owed_ledger_partitions_keep() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_timeout text := current_setting('lock_timeout');
    v_made integer;
BEGIN
    PERFORM set_config('lock_timeout', '1s', true);
    SELECT count(*) FILTER (WHERE created) INTO v_made FROM owed_ledger_partitions_ensure(now(), 2);
    PERFORM set_config('lock_timeout', v_timeout, true);
    RETURN v_made;
END
$$;
REVOKE EXECUTE ON FUNCTION owed_ledger_partitions_keep() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_partitions_keep() TO owed_runtime;

-- A payload that several rows of one scheduling batch share (an event with
-- one payload and 1,000 recipients) is stored once, here, and each row
-- points at it by payload_id with its own payload NULL; a row with a payload
-- of its own keeps it in place. Without it one 86 KB request wrote a 62 KB
-- payload into each of 1,000 rows: 62 MB.
CREATE TABLE owed_event_payloads (
    tenant_id  text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    payload    jsonb       NOT NULL CHECK (octet_length(payload::text) <= 65536),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

ALTER TABLE owed_event_payloads ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_event_payloads FORCE ROW LEVEL SECURITY;
-- The worker's claim batch reads the shared payloads of every tenant it
-- names (owed_tenant_scope); only the scheduling of one tenant writes
-- them.
CREATE POLICY owed_event_payloads_tenant ON owed_event_payloads TO owed_runtime
    USING (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]))
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true));
CREATE POLICY owed_event_payloads_owner ON owed_event_payloads TO CURRENT_USER USING (true) WITH CHECK (true);

-- DELETE: the ledger removes a payload that no row of its batch took.
GRANT SELECT, INSERT, DELETE ON owed_event_payloads TO owed_runtime;
