-- Input bounds the API and the database agree on (issue 16).
--
-- 1. An event's shared payload is stored once. One /v1/events request of
--    86 KB named a 62 KB payload and 1,000 recipients, and the ledger wrote
--    it into each recipient's row: 62 MB. ledger.Schedule now writes a
--    payload that several rows of one batch share into owed_event_payloads
--    once, and each of those rows points at it (payload_id) with its own
--    payload NULL; a row with a payload of its own keeps it in place. Every
--    reader of a row's payload reads coalesce(own, shared): owed_claim (the
--    worker's claim, replaced below with that one change), the ledger's
--    lookups (ledger.notificationColumns), and owed_apply_intent, whose
--    reschedule of a delivered row copies the reference to the new row.
--    There is no foreign key: the ledger writes the payload and its rows in
--    one transaction and deletes a payload no row of it took (a replayed
--    event), and a foreign key would make that delete scan the ledger for
--    want of an index on payload_id.
--
-- 2. Text bounds count bytes, as the Go validators (and the queue envelope)
--    do: length() counts characters, so a 512-character recipient of
--    multibyte characters passed the table while every Go caller refused
--    it. migrations/00009 did this for tenant_id; this does every other
--    bounded text column the API or the services validate. As in 00009 each
--    check is swapped NOT VALID and validated separately (a scan under a
--    lock that lets reads and writes go on), outside a transaction, and
--    every step can be run again. Should a VALIDATE fail, a row holds a
--    value the services would refuse: find it with
--      SELECT id, <column> FROM <table> WHERE octet_length(<column>) > <limit>;
--
-- The payload size check (octet_length(payload::text) <= 65536) already
-- measures the stored form; payload.Canonical computes that same form in Go.

-- +goose NO TRANSACTION

-- +goose Up
CREATE TABLE IF NOT EXISTS owed_event_payloads (
    tenant_id  text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    payload    jsonb       NOT NULL CHECK (octet_length(payload::text) <= 65536),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
ALTER TABLE owed_event_payloads ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_event_payloads FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS owed_event_payloads_tenant ON owed_event_payloads;
CREATE POLICY owed_event_payloads_tenant ON owed_event_payloads
    USING (tenant_id = current_setting('owed.tenant_id', true)
           OR current_setting('owed.bypass_rls', true) = 'on')
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true)
           OR current_setting('owed.bypass_rls', true) = 'on');

-- DELETE: the ledger removes a payload that no row of its batch took.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_app') THEN
        GRANT SELECT, INSERT, DELETE ON owed_event_payloads TO owed_app;
    END IF;
END
$$;
-- +goose StatementEnd

ALTER TABLE owed_notifications ADD COLUMN IF NOT EXISTS payload_id bigint;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_claim(p_tenant text, p_id bigint, p_now timestamptz, p_lease_until timestamptz,
                           p_due timestamptz, p_latest_due timestamptz)
RETURNS TABLE (id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               claim_seq bigint, took boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    -- A claim lapsed with an intent waiting (its worker died or stalled
    -- mid-send after a cancel or reschedule landed): hand the row back
    -- first, as the lost worker's release would have, so the intent
    -- trigger applies it. The claim below then finds the row cancelled
    -- (settled) or moved (stale) and sends nothing the caller was told
    -- would not be sent. claimed_at stays, so a send after a reschedule is
    -- still flagged a possible duplicate.
    UPDATE owed_notifications n
       SET state = 'queued', lease_until = p_now, updated_at = p_now
     WHERE n.id = p_id AND n.state = 'sending' AND n.lease_until <= p_now
       AND n.intent IS NOT NULL AND n.intent_outcome IS NULL;
    RETURN QUERY
    WITH cur AS (
        SELECT n.* FROM owed_notifications n WHERE n.id = p_id FOR UPDATE
    ), taken AS (
        -- Only an unsettled row is taken: failed is as final as delivered
        -- until ledger.Redrive reopens it. Each claim that takes the row
        -- moves its token on.
        UPDATE owed_notifications n
           SET state = 'sending', claimed_at = p_now, lease_until = p_lease_until, updated_at = p_now,
               claim_seq = n.claim_seq + 1
          FROM cur
         WHERE n.id = cur.id
           AND cur.settled_at IS NULL
           AND cur.due_at = p_due
           AND (cur.expires_at IS NULL OR cur.expires_at > p_now)
           AND (cur.state <> 'sending' OR cur.lease_until <= p_now)
           AND cur.due_at <= p_latest_due
        RETURNING n.id, n.claim_seq
    )
    -- The row as it was before the claim, except claim_seq: the new token
    -- when the claim took the row.
    SELECT cur.id, cur.tenant_id, cur.recipient, cur.channel, cur.kind, cur.ref_id, cur.due_at,
           cur.expires_at, coalesce(cur.payload, (SELECT p.payload FROM owed_event_payloads p
                                   WHERE p.tenant_id = cur.tenant_id AND p.id = cur.payload_id)), cur.state, cur.attempts, cur.lease_until, cur.claimed_at,
           cur.published_at, cur.delivered_at, cur.settled_at, cur.provider, cur.provider_message_id,
           cur.last_error, cur.created_at, cur.updated_at, cur.queue_generation,
           coalesce((SELECT t.claim_seq FROM taken t), cur.claim_seq), EXISTS (SELECT 1 FROM taken)
      FROM cur;
END
$$;
-- +goose StatementEnd


-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_apply_intent() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ended_at timestamptz := NEW.updated_at;
BEGIN
    IF OLD.intent = 'cancel' THEN
        IF NEW.state IN ('delivered', 'skipped', 'expired') THEN
            NEW.intent_outcome := 'too_late';
            RETURN NEW;
        END IF;
        -- Handed back, taken back by the sweep, failed, or moved or
        -- cancelled directly after the claim ran out: the cancel came
        -- first, and it wins.
        NEW.last_error := CASE WHEN NEW.state = 'failed'
                               THEN 'cancelled; the send in flight failed: ' || coalesce(NEW.last_error, 'failed')
                               ELSE 'cancelled' END;
        NEW.state := 'cancelled';
        NEW.settled_at := coalesce(NEW.settled_at, ended_at);
        NEW.lease_until := NULL;
        NEW.intent_outcome := 'applied';
        RETURN NEW;
    END IF;

    -- A reschedule. Only ledger.Reschedule moves a row from sending to
    -- pending (the worker's release hands it back as queued, the sweep's
    -- lease takes it as leased), and only a cancel makes it cancelled.
    IF NEW.state IN ('pending', 'cancelled') THEN
        NEW.intent_outcome := 'superseded';
    ELSIF NEW.settled_at IS NOT NULL THEN
        INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at,
                                        payload, payload_id, created_at, updated_at)
        VALUES (OLD.tenant_id, OLD.recipient, OLD.channel, OLD.kind, OLD.ref_id, OLD.intent_due_at,
                OLD.intent_expires_at, OLD.payload, OLD.payload_id, ended_at, ended_at)
        ON CONFLICT ON CONSTRAINT owed_notifications_schedule_key DO NOTHING;
        NEW.intent_outcome := 'new_row';
    ELSIF EXISTS (SELECT 1 FROM owed_notifications o
                   WHERE o.tenant_id = OLD.tenant_id AND o.recipient = OLD.recipient AND o.kind = OLD.kind
                     AND o.ref_id = OLD.ref_id AND o.due_at = OLD.intent_due_at AND o.id <> OLD.id) THEN
        -- A row for this recipient was scheduled at the new time after the
        -- intent was recorded: that row is the send the snooze asked for,
        -- and moving this one onto its key would fail the release.
        NEW.state := 'cancelled';
        NEW.settled_at := ended_at;
        NEW.lease_until := NULL;
        NEW.last_error := 'rescheduled onto a row already scheduled at that due time';
        NEW.intent_outcome := 'new_row';
    ELSE
        -- As qReschedule moves an open row: the new due time is a new
        -- provider idempotency key, so the message handed back (published
        -- for the old one) is stale to the claim, and the next publish gets
        -- a new queue generation. A row the sweep is taking back stays
        -- leased, so the sweep publishes it for the new due time; claimed_at
        -- stays as the release left it, so a send that may have reached the
        -- provider still marks the next one a possible duplicate.
        NEW.due_at := OLD.intent_due_at;
        NEW.expires_at := OLD.intent_expires_at;
        NEW.published_at := NULL;
        NEW.queue_generation := greatest(NEW.queue_generation, OLD.queue_generation + 1);
        IF NEW.state <> 'leased' THEN
            NEW.state := 'pending';
            NEW.lease_until := NULL;
        END IF;
        NEW.intent_outcome := 'applied';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

ALTER TABLE owed_notifications ALTER COLUMN payload DROP NOT NULL;
ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_payload_present,
    ADD CONSTRAINT owed_notifications_payload_present
        CHECK (payload IS NOT NULL OR payload_id IS NOT NULL) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_payload_present;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_recipient_check,
    ADD CONSTRAINT owed_notifications_recipient_check CHECK (recipient <> '' AND octet_length(recipient) <= 512) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_recipient_check;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_channel_check,
    ADD CONSTRAINT owed_notifications_channel_check CHECK (channel <> '' AND octet_length(channel) <= 64) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_channel_check;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_kind_check,
    ADD CONSTRAINT owed_notifications_kind_check CHECK (kind <> '' AND octet_length(kind) <= 128) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_kind_check;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_ref_id_check,
    ADD CONSTRAINT owed_notifications_ref_id_check CHECK (ref_id <> '' AND octet_length(ref_id) <= 256) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_ref_id_check;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_recipient_check,
    ADD CONSTRAINT owed_items_recipient_check CHECK (recipient <> '' AND octet_length(recipient) <= 512) NOT VALID;
ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_recipient_check;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_channel_check,
    ADD CONSTRAINT owed_items_channel_check CHECK (channel <> '' AND octet_length(channel) <= 64) NOT VALID;
ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_channel_check;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_kind_check,
    ADD CONSTRAINT owed_items_kind_check CHECK (kind <> '' AND octet_length(kind) <= 128) NOT VALID;
ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_kind_check;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_ref_id_check,
    ADD CONSTRAINT owed_items_ref_id_check CHECK (ref_id <> '' AND octet_length(ref_id) <= 256) NOT VALID;
ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_ref_id_check;

ALTER TABLE owed_api_tokens
    DROP CONSTRAINT IF EXISTS owed_api_tokens_name_check,
    ADD CONSTRAINT owed_api_tokens_name_check CHECK (octet_length(name) <= 128) NOT VALID;
ALTER TABLE owed_api_tokens VALIDATE CONSTRAINT owed_api_tokens_name_check;

ALTER TABLE owed_provider_pace
    DROP CONSTRAINT IF EXISTS owed_provider_pace_account_check,
    ADD CONSTRAINT owed_provider_pace_account_check CHECK (account <> '' AND octet_length(account) <= 128) NOT VALID;
ALTER TABLE owed_provider_pace VALIDATE CONSTRAINT owed_provider_pace_account_check;

ALTER TABLE owed_contacts
    DROP CONSTRAINT IF EXISTS owed_contacts_address_check,
    ADD CONSTRAINT owed_contacts_address_check CHECK (address <> '' AND octet_length(address) <= 512) NOT VALID;
ALTER TABLE owed_contacts VALIDATE CONSTRAINT owed_contacts_address_check;

-- +goose Down
-- The character bounds admit every value the byte bounds do, so validating
-- them never fails.
ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_recipient_check,
    ADD CONSTRAINT owed_notifications_recipient_check CHECK (recipient <> '' AND length(recipient) <= 512) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_recipient_check;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_channel_check,
    ADD CONSTRAINT owed_notifications_channel_check CHECK (channel <> '' AND length(channel) <= 64) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_channel_check;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_kind_check,
    ADD CONSTRAINT owed_notifications_kind_check CHECK (kind <> '' AND length(kind) <= 128) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_kind_check;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_ref_id_check,
    ADD CONSTRAINT owed_notifications_ref_id_check CHECK (ref_id <> '' AND length(ref_id) <= 256) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_ref_id_check;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_recipient_check,
    ADD CONSTRAINT owed_items_recipient_check CHECK (recipient <> '' AND length(recipient) <= 512) NOT VALID;
ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_recipient_check;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_channel_check,
    ADD CONSTRAINT owed_items_channel_check CHECK (channel <> '' AND length(channel) <= 64) NOT VALID;
ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_channel_check;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_kind_check,
    ADD CONSTRAINT owed_items_kind_check CHECK (kind <> '' AND length(kind) <= 128) NOT VALID;
ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_kind_check;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_ref_id_check,
    ADD CONSTRAINT owed_items_ref_id_check CHECK (ref_id <> '' AND length(ref_id) <= 256) NOT VALID;
ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_ref_id_check;

ALTER TABLE owed_api_tokens
    DROP CONSTRAINT IF EXISTS owed_api_tokens_name_check,
    ADD CONSTRAINT owed_api_tokens_name_check CHECK (length(name) <= 128) NOT VALID;
ALTER TABLE owed_api_tokens VALIDATE CONSTRAINT owed_api_tokens_name_check;

ALTER TABLE owed_provider_pace
    DROP CONSTRAINT IF EXISTS owed_provider_pace_account_check,
    ADD CONSTRAINT owed_provider_pace_account_check CHECK (account <> '' AND length(account) <= 128) NOT VALID;
ALTER TABLE owed_provider_pace VALIDATE CONSTRAINT owed_provider_pace_account_check;

ALTER TABLE owed_contacts
    DROP CONSTRAINT IF EXISTS owed_contacts_address_check,
    ADD CONSTRAINT owed_contacts_address_check CHECK (address <> '' AND length(address) <= 512) NOT VALID;
ALTER TABLE owed_contacts VALIDATE CONSTRAINT owed_contacts_address_check;

-- Shared payloads go back into their rows before the column is NOT NULL
-- again; the statement crosses tenants, as the owner under FORCE ROW LEVEL
-- SECURITY, so it sets the bypass for its own (implicit) transaction.
-- +goose StatementBegin
DO $$
BEGIN
    PERFORM set_config('owed.bypass_rls', 'on', true);
    UPDATE owed_notifications n
       SET payload = p.payload, payload_id = NULL
      FROM owed_event_payloads p
     WHERE n.payload IS NULL AND p.tenant_id = n.tenant_id AND p.id = n.payload_id;
END
$$;
-- +goose StatementEnd
ALTER TABLE owed_notifications DROP CONSTRAINT IF EXISTS owed_notifications_payload_present;
ALTER TABLE owed_notifications ALTER COLUMN payload SET NOT NULL;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_apply_intent() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ended_at timestamptz := NEW.updated_at;
BEGIN
    IF OLD.intent = 'cancel' THEN
        IF NEW.state IN ('delivered', 'skipped', 'expired') THEN
            NEW.intent_outcome := 'too_late';
            RETURN NEW;
        END IF;
        -- Handed back, taken back by the sweep, failed, or moved or
        -- cancelled directly after the claim ran out: the cancel came
        -- first, and it wins.
        NEW.last_error := CASE WHEN NEW.state = 'failed'
                               THEN 'cancelled; the send in flight failed: ' || coalesce(NEW.last_error, 'failed')
                               ELSE 'cancelled' END;
        NEW.state := 'cancelled';
        NEW.settled_at := coalesce(NEW.settled_at, ended_at);
        NEW.lease_until := NULL;
        NEW.intent_outcome := 'applied';
        RETURN NEW;
    END IF;

    -- A reschedule. Only ledger.Reschedule moves a row from sending to
    -- pending (the worker's release hands it back as queued, the sweep's
    -- lease takes it as leased), and only a cancel makes it cancelled.
    IF NEW.state IN ('pending', 'cancelled') THEN
        NEW.intent_outcome := 'superseded';
    ELSIF NEW.settled_at IS NOT NULL THEN
        INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at,
                                        payload, created_at, updated_at)
        VALUES (OLD.tenant_id, OLD.recipient, OLD.channel, OLD.kind, OLD.ref_id, OLD.intent_due_at,
                OLD.intent_expires_at, OLD.payload, ended_at, ended_at)
        ON CONFLICT ON CONSTRAINT owed_notifications_schedule_key DO NOTHING;
        NEW.intent_outcome := 'new_row';
    ELSIF EXISTS (SELECT 1 FROM owed_notifications o
                   WHERE o.tenant_id = OLD.tenant_id AND o.recipient = OLD.recipient AND o.kind = OLD.kind
                     AND o.ref_id = OLD.ref_id AND o.due_at = OLD.intent_due_at AND o.id <> OLD.id) THEN
        -- A row for this recipient was scheduled at the new time after the
        -- intent was recorded: that row is the send the snooze asked for,
        -- and moving this one onto its key would fail the release.
        NEW.state := 'cancelled';
        NEW.settled_at := ended_at;
        NEW.lease_until := NULL;
        NEW.last_error := 'rescheduled onto a row already scheduled at that due time';
        NEW.intent_outcome := 'new_row';
    ELSE
        -- As qReschedule moves an open row: the new due time is a new
        -- provider idempotency key, so the message handed back (published
        -- for the old one) is stale to the claim, and the next publish gets
        -- a new queue generation. A row the sweep is taking back stays
        -- leased, so the sweep publishes it for the new due time; claimed_at
        -- stays as the release left it, so a send that may have reached the
        -- provider still marks the next one a possible duplicate.
        NEW.due_at := OLD.intent_due_at;
        NEW.expires_at := OLD.intent_expires_at;
        NEW.published_at := NULL;
        NEW.queue_generation := greatest(NEW.queue_generation, OLD.queue_generation + 1);
        IF NEW.state <> 'leased' THEN
            NEW.state := 'pending';
            NEW.lease_until := NULL;
        END IF;
        NEW.intent_outcome := 'applied';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_claim(p_tenant text, p_id bigint, p_now timestamptz, p_lease_until timestamptz,
                           p_due timestamptz, p_latest_due timestamptz)
RETURNS TABLE (id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               claim_seq bigint, took boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    -- A claim lapsed with an intent waiting (its worker died or stalled
    -- mid-send after a cancel or reschedule landed): hand the row back
    -- first, as the lost worker's release would have, so the intent
    -- trigger applies it. The claim below then finds the row cancelled
    -- (settled) or moved (stale) and sends nothing the caller was told
    -- would not be sent. claimed_at stays, so a send after a reschedule is
    -- still flagged a possible duplicate.
    UPDATE owed_notifications n
       SET state = 'queued', lease_until = p_now, updated_at = p_now
     WHERE n.id = p_id AND n.state = 'sending' AND n.lease_until <= p_now
       AND n.intent IS NOT NULL AND n.intent_outcome IS NULL;
    RETURN QUERY
    WITH cur AS (
        SELECT n.* FROM owed_notifications n WHERE n.id = p_id FOR UPDATE
    ), taken AS (
        -- Only an unsettled row is taken: failed is as final as delivered
        -- until ledger.Redrive reopens it. Each claim that takes the row
        -- moves its token on.
        UPDATE owed_notifications n
           SET state = 'sending', claimed_at = p_now, lease_until = p_lease_until, updated_at = p_now,
               claim_seq = n.claim_seq + 1
          FROM cur
         WHERE n.id = cur.id
           AND cur.settled_at IS NULL
           AND cur.due_at = p_due
           AND (cur.expires_at IS NULL OR cur.expires_at > p_now)
           AND (cur.state <> 'sending' OR cur.lease_until <= p_now)
           AND cur.due_at <= p_latest_due
        RETURNING n.id, n.claim_seq
    )
    -- The row as it was before the claim, except claim_seq: the new token
    -- when the claim took the row.
    SELECT cur.id, cur.tenant_id, cur.recipient, cur.channel, cur.kind, cur.ref_id, cur.due_at,
           cur.expires_at, cur.payload, cur.state, cur.attempts, cur.lease_until, cur.claimed_at,
           cur.published_at, cur.delivered_at, cur.settled_at, cur.provider, cur.provider_message_id,
           cur.last_error, cur.created_at, cur.updated_at, cur.queue_generation,
           coalesce((SELECT t.claim_seq FROM taken t), cur.claim_seq), EXISTS (SELECT 1 FROM taken)
      FROM cur;
END
$$;
-- +goose StatementEnd


ALTER TABLE owed_notifications DROP COLUMN IF EXISTS payload_id;
DROP TABLE IF EXISTS owed_event_payloads;
