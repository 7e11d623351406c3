-- An intent (migrations/00013) waits on a row being sent and is applied when
-- the row leaves sending. A worker that dies mid-send leaves the row sending
-- until its lease runs out, and the next claim took it over sending to
-- sending, so the trigger never ran and the row was sent again: a cancel the
-- API had answered "recorded" was not honoured. owed_claim now hands such a
-- row back first, so the intent applies before the claim decides.
--
-- The result type is unchanged, so the function is replaced in place; the
-- Down puts back migrations/00012's body.

-- +goose Up
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

-- +goose Down
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
