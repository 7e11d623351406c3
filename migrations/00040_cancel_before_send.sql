-- A cancel or reschedule accepted between a worker's claim and its send is
-- honoured (issue 27): before, the claim made the row "in flight" at once,
-- so a change that landed while the worker waited for the due second, the
-- account, the pace or the recipient look-up only became an intent, and the
-- worker's last check before the send answered from memory: the row was
-- sent, and the cancel ended too_late (a snooze gave two sends).
--
-- Now the worker's claim is revocable (claim_revocable) until the worker's
-- check right before the send (owed_extend_claims with start_send), which
-- always asks the ledger and makes the claim irrevocable. A change that
-- finds the claim revocable takes the row back at once, as for an open row
-- (ledger.Cancel, ledger.Reschedule); the check then finds the claim gone
-- and nothing is sent. A revocable claim no longer stamps claimed_at: the
-- check does, when the send may reach the provider.
--
-- Expand-only: a defaulted column; owed_claim gains a defaulted parameter,
-- so the previous release's calls (owed_claim_batch, owed_claim_batch_marked
-- without revocable) claim as before, irrevocably, and its heartbeats
-- (without start_send) extend as before.

-- +goose Up
ALTER TABLE owed_notifications ADD COLUMN claim_revocable boolean NOT NULL DEFAULT false;

DROP FUNCTION owed_claim(text, bigint, timestamptz, timestamptz, timestamptz, timestamptz);

-- +goose StatementBegin
CREATE FUNCTION owed_claim(p_tenant text, p_id bigint, p_now timestamptz, p_lease_until timestamptz,
                           p_due timestamptz, p_latest_due timestamptz, p_revocable boolean DEFAULT false)
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
           SET state = 'sending', lease_until = p_lease_until, updated_at = p_now,
               claimed_at = CASE WHEN p_revocable THEN n.claimed_at ELSE p_now END,
               claim_revocable = p_revocable, claim_seq = n.claim_seq + 1
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
CREATE OR REPLACE FUNCTION owed_claim_batch_marked(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
                                        p_latest_due timestamptz)
RETURNS TABLE (idx integer, id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               claim_seq bigint, took boolean, mark_provider text, mark_code text, mark_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(idx integer, tenant_id text, id bigint, due_at timestamptz,
                                                            revocable boolean)
             ORDER BY x.id, x.idx
    LOOP
        PERFORM set_config('owed.tenant_id', r.tenant_id, true);
        RETURN QUERY
        SELECT r.idx, c.*, u.provider, u.code, u.marked_at
          FROM owed_claim(r.tenant_id, r.id, p_now, p_lease_until, r.due_at, p_latest_due,
                          coalesce(r.revocable, false)) c
          LEFT JOIN owed_undeliverable u
            ON c.took AND u.tenant_id = c.tenant_id AND u.channel = c.channel AND u.address = c.recipient;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_extend_claims(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz)
RETURNS TABLE (idx integer, held boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(idx integer, tenant_id text, id bigint, claim_seq bigint,
                                                            start_send boolean)
             ORDER BY x.id, x.idx
    LOOP
        PERFORM set_config('owed.tenant_id', r.tenant_id, true);
        IF r.start_send THEN
            UPDATE owed_notifications n
               SET lease_until = greatest(n.lease_until, p_lease_until), claim_revocable = false,
                   claimed_at = CASE WHEN n.claim_revocable THEN p_now ELSE n.claimed_at END,
                   updated_at = p_now
             WHERE n.id = r.id AND n.state = 'sending' AND n.claim_seq = r.claim_seq;
        ELSE
            UPDATE owed_notifications n
               SET lease_until = greatest(n.lease_until, p_lease_until)
             WHERE n.id = r.id AND n.state = 'sending' AND n.claim_seq = r.claim_seq;
        END IF;
        idx := r.idx;
        held := FOUND;
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION owed_claim(text, bigint, timestamptz, timestamptz, timestamptz, timestamptz, boolean);

-- +goose StatementBegin
CREATE FUNCTION owed_claim(p_tenant text, p_id bigint, p_now timestamptz, p_lease_until timestamptz,
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
CREATE OR REPLACE FUNCTION owed_claim_batch_marked(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
                                        p_latest_due timestamptz)
RETURNS TABLE (idx integer, id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               claim_seq bigint, took boolean, mark_provider text, mark_code text, mark_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(idx integer, tenant_id text, id bigint, due_at timestamptz)
             ORDER BY x.id, x.idx
    LOOP
        PERFORM set_config('owed.tenant_id', r.tenant_id, true);
        RETURN QUERY
        SELECT r.idx, c.*, u.provider, u.code, u.marked_at
          FROM owed_claim(r.tenant_id, r.id, p_now, p_lease_until, r.due_at, p_latest_due) c
          LEFT JOIN owed_undeliverable u
            ON c.took AND u.tenant_id = c.tenant_id AND u.channel = c.channel AND u.address = c.recipient;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_extend_claims(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz)
RETURNS TABLE (idx integer, held boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(idx integer, tenant_id text, id bigint, claim_seq bigint)
             ORDER BY x.id, x.idx
    LOOP
        PERFORM set_config('owed.tenant_id', r.tenant_id, true);
        UPDATE owed_notifications n
           SET lease_until = greatest(n.lease_until, p_lease_until)
         WHERE n.id = r.id AND n.state = 'sending' AND n.claim_seq = r.claim_seq;
        idx := r.idx;
        held := FOUND;
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd

ALTER TABLE owed_notifications DROP COLUMN claim_revocable;
