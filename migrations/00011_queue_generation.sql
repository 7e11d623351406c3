-- A row's queue generation, and a claim that never reopens a settled row.
--
-- queue_generation counts the deliberate republishes of a row: the sweep's
-- requeue of a row published before (its message was lost, acked or
-- dead-lettered, and its lease ran out), a reschedule, and an operator's
-- redrive of a failed row each add one. The queue message's key is the
-- row's provider idempotency key plus the generation
-- (ledger.QueueKey), so a queue that deduplicates by key never drops a
-- republish as a copy of the message it replaces; the provider's key stays
-- the row's own, unchanged by the generation.
--
-- owed_claim no longer takes a failed row: a redrive is the ledger
-- transition ledger.Redrive (failed back to pending), never a message that
-- comes back from the dead letters, so a stray copy of a failed row's
-- message is acked and dropped like any settled row's. The claim also
-- returns the generation with the row. A function's result type cannot be
-- replaced in place, so owed_claim and owed_claim_batch are dropped and
-- created again (and put back as migrations/00010 left them on the way
-- down).

-- +goose Up
ALTER TABLE owed_notifications
    ADD COLUMN queue_generation integer NOT NULL DEFAULT 0 CHECK (queue_generation >= 0);

DROP FUNCTION owed_claim_batch(jsonb, timestamptz, timestamptz, timestamptz);
DROP FUNCTION owed_claim(text, bigint, timestamptz, timestamptz, timestamptz, timestamptz);

-- +goose StatementBegin
CREATE FUNCTION owed_claim(p_tenant text, p_id bigint, p_now timestamptz, p_lease_until timestamptz,
                           p_due timestamptz, p_latest_due timestamptz)
RETURNS TABLE (id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               took boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    RETURN QUERY
    WITH cur AS (
        SELECT n.* FROM owed_notifications n WHERE n.id = p_id FOR UPDATE
    ), taken AS (
        -- Only an unsettled row is taken: failed is as final as delivered
        -- until ledger.Redrive reopens it.
        UPDATE owed_notifications n
           SET state = 'sending', claimed_at = p_now, lease_until = p_lease_until, updated_at = p_now
          FROM cur
         WHERE n.id = cur.id
           AND cur.settled_at IS NULL
           AND cur.due_at = p_due
           AND (cur.expires_at IS NULL OR cur.expires_at > p_now)
           AND (cur.state <> 'sending' OR cur.lease_until <= p_now)
           AND cur.due_at <= p_latest_due
        RETURNING n.id
    )
    SELECT cur.id, cur.tenant_id, cur.recipient, cur.channel, cur.kind, cur.ref_id, cur.due_at,
           cur.expires_at, cur.payload, cur.state, cur.attempts, cur.lease_until, cur.claimed_at,
           cur.published_at, cur.delivered_at, cur.settled_at, cur.provider, cur.provider_message_id,
           cur.last_error, cur.created_at, cur.updated_at, cur.queue_generation, EXISTS (SELECT 1 FROM taken)
      FROM cur;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_claim_batch(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
                                 p_latest_due timestamptz)
RETURNS TABLE (idx integer, id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               took boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(idx integer, tenant_id text, id bigint, due_at timestamptz)
             ORDER BY x.id, x.idx
    LOOP
        RETURN QUERY SELECT r.idx, c.* FROM owed_claim(r.tenant_id, r.id, p_now, p_lease_until, r.due_at, p_latest_due) c;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION owed_claim_batch(jsonb, timestamptz, timestamptz, timestamptz);
DROP FUNCTION owed_claim(text, bigint, timestamptz, timestamptz, timestamptz, timestamptz);

-- +goose StatementBegin
CREATE FUNCTION owed_claim(p_tenant text, p_id bigint, p_now timestamptz, p_lease_until timestamptz,
                           p_due timestamptz, p_latest_due timestamptz)
RETURNS TABLE (id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, took boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    RETURN QUERY
    WITH cur AS (
        SELECT n.* FROM owed_notifications n WHERE n.id = p_id FOR UPDATE
    ), taken AS (
        UPDATE owed_notifications n
           SET state = 'sending', claimed_at = p_now, lease_until = p_lease_until, settled_at = NULL,
               updated_at = p_now
          FROM cur
         WHERE n.id = cur.id
           AND (cur.settled_at IS NULL OR cur.state = 'failed')
           AND cur.due_at = p_due
           AND (cur.expires_at IS NULL OR cur.expires_at > p_now)
           AND (cur.state <> 'sending' OR cur.lease_until <= p_now)
           AND cur.due_at <= p_latest_due
        RETURNING n.id
    )
    SELECT cur.id, cur.tenant_id, cur.recipient, cur.channel, cur.kind, cur.ref_id, cur.due_at,
           cur.expires_at, cur.payload, cur.state, cur.attempts, cur.lease_until, cur.claimed_at,
           cur.published_at, cur.delivered_at, cur.settled_at, cur.provider, cur.provider_message_id,
           cur.last_error, cur.created_at, cur.updated_at, EXISTS (SELECT 1 FROM taken)
      FROM cur;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_claim_batch(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
                                 p_latest_due timestamptz)
RETURNS TABLE (idx integer, id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, took boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(idx integer, tenant_id text, id bigint, due_at timestamptz)
             ORDER BY x.id, x.idx
    LOOP
        RETURN QUERY SELECT r.idx, c.* FROM owed_claim(r.tenant_id, r.id, p_now, p_lease_until, r.due_at, p_latest_due) c;
    END LOOP;
END
$$;
-- +goose StatementEnd

ALTER TABLE owed_notifications DROP COLUMN queue_generation;
