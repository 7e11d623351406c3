-- A fencing token on every claim.
--
-- claim_seq counts a row's successful claims: owed_claim adds one each time it
-- takes the row, and the claim hands the new value to its worker as the
-- token of that claim. Every write a worker makes after its claim names the
-- token, and changes the row only while the token is still the row's (and
-- the row is still sending): a worker whose lease ran out while it stalled,
-- and whose row another worker has claimed since, can no longer release,
-- fail, skip, expire or extend the row out from under that other claim. The
-- ledger's Go side (internal/ledger/fence.go) reports such a write as
-- ErrClaimLost instead of a silent no-op.
--
-- owed_extend_claims is the heartbeat: it moves the lease of each row still
-- held under its token, so a claim stays the worker's for as long as the
-- worker is alive, however long its resolve, pace wait or send takes.
--
-- owed_settle_delivered takes the token too. An accepted send is the truth
-- and is always recorded; only the row's fate depends on the token. A
-- superseded claim's accepted send still settles the row delivered (the
-- provider has it), unless another worker holds the row under a live claim
-- right now: that claim's send may already be under way, so the row is left
-- to it and the accepted attempt is recorded as a possible duplicate, as is
-- every send made under a superseded claim.
--
-- Adding a column with a constant default rewrites nothing. A function's
-- result type cannot be replaced in place, so owed_claim, owed_settle_delivered
-- and their batch forms are dropped and created again (and put back as
-- migrations/00011 and 00010 left them on the way down).

-- +goose Up
ALTER TABLE owed_notifications ADD COLUMN claim_seq bigint NOT NULL DEFAULT 0;

DROP FUNCTION owed_claim_batch(jsonb, timestamptz, timestamptz, timestamptz);
DROP FUNCTION owed_claim(text, bigint, timestamptz, timestamptz, timestamptz, timestamptz);
DROP FUNCTION owed_settle_delivered_batch(jsonb, timestamptz);
DROP FUNCTION owed_settle_delivered(text, bigint, text, timestamptz, timestamptz, text, integer, boolean);

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

-- +goose StatementBegin
CREATE FUNCTION owed_claim_batch(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
                                 p_latest_due timestamptz)
RETURNS TABLE (idx integer, id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               claim_seq bigint, took boolean)
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

-- +goose StatementBegin
CREATE FUNCTION owed_settle_delivered(p_tenant text, p_id bigint, p_claim_seq bigint, p_provider text,
                                      p_started timestamptz, p_now timestamptz, p_message_id text,
                                      p_http_status integer, p_possible_duplicate boolean,
                                      OUT changed boolean, OUT held_elsewhere boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    -- Everything is judged on the row as it was before the update. The
    -- row is stamped delivered when it is open (a failed row included: it
    -- failed while this send was under way) and no other live claim holds
    -- it; an already delivered row keeps its first delivered_at and message
    -- id. The attempt is recorded in every case, because it happened.
    WITH old AS (
        SELECT n.id, n.claim_seq <> p_claim_seq AS superseded,
               coalesce(n.claim_seq <> p_claim_seq AND n.state = 'sending' AND n.lease_until > p_now, false)
                   AS held_elsewhere,
               (n.settled_at IS NULL OR n.state = 'failed') AS open
          FROM owed_notifications n WHERE n.id = p_id FOR UPDATE
    ), judged AS (
        SELECT old.*, old.open AND NOT old.held_elsewhere AS stamp FROM old
    ), settled AS (
        UPDATE owed_notifications n
           SET attempts = n.attempts + 1, updated_at = p_now,
               state = CASE WHEN j.stamp THEN 'delivered' ELSE n.state END,
               delivered_at = CASE WHEN j.stamp THEN p_now ELSE n.delivered_at END,
               settled_at = CASE WHEN j.stamp THEN p_now ELSE n.settled_at END,
               lease_until = CASE WHEN j.stamp THEN NULL ELSE n.lease_until END,
               provider = CASE WHEN j.stamp THEN p_provider ELSE n.provider END,
               provider_message_id = CASE WHEN j.stamp THEN p_message_id ELSE n.provider_message_id END,
               last_error = CASE WHEN j.stamp THEN NULL ELSE n.last_error END
          FROM judged j
         WHERE n.id = j.id
        RETURNING n.id, n.tenant_id, n.attempts, j.stamp, j.superseded, j.held_elsewhere
    ), recorded AS (
        INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
                                                finished_at, outcome, provider_message_id, http_status, error,
                                                possible_duplicate)
        SELECT id, tenant_id, attempts, p_provider, p_started, p_now, 'accepted', p_message_id,
               p_http_status, NULL, p_possible_duplicate OR superseded
          FROM settled
    )
    SELECT s.stamp, s.held_elsewhere INTO changed, held_elsewhere FROM settled s;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_settle_delivered_batch(p_rows jsonb, p_now timestamptz)
RETURNS TABLE (idx integer, changed boolean, held_elsewhere boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(
                 idx integer, tenant_id text, id bigint, claim_seq bigint, provider text,
                 started_at timestamptz, message_id text, http_status integer, possible_duplicate boolean)
             ORDER BY x.id, x.idx
    LOOP
        idx := r.idx;
        SELECT s.changed, s.held_elsewhere INTO changed, held_elsewhere
          FROM owed_settle_delivered(r.tenant_id, r.id, r.claim_seq, r.provider, r.started_at, p_now,
                                     r.message_id, r.http_status, r.possible_duplicate) s;
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The heartbeat of many claims, possibly of many tenants, in one statement
-- and one commit: each row's lease moves to p_lease_until (never back) if
-- the row is still sending under the token its worker holds. held says
-- whether it was; a row not visible in its tenant's scope is not held.
CREATE FUNCTION owed_extend_claims(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz)
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

-- +goose Down
DROP FUNCTION owed_extend_claims(jsonb, timestamptz, timestamptz);
DROP FUNCTION owed_settle_delivered_batch(jsonb, timestamptz);
DROP FUNCTION owed_settle_delivered(text, bigint, bigint, text, timestamptz, timestamptz, text, integer, boolean);
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

-- +goose StatementBegin
CREATE FUNCTION owed_settle_delivered(p_tenant text, p_id bigint, p_provider text, p_started timestamptz,
                                      p_now timestamptz, p_message_id text, p_http_status integer,
                                      p_possible_duplicate boolean)
RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    changed boolean;
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    -- "open" is read before the update: only an open row (or a failed one an
    -- operator redrove) is stamped delivered; an already delivered row keeps
    -- its first delivered_at and message id.
    WITH old AS (
        SELECT n.id, (n.settled_at IS NULL OR n.state = 'failed') AS open
          FROM owed_notifications n WHERE n.id = p_id FOR UPDATE
    ), settled AS (
        UPDATE owed_notifications n
           SET attempts = n.attempts + 1, updated_at = p_now,
               state = CASE WHEN old.open THEN 'delivered' ELSE n.state END,
               delivered_at = CASE WHEN old.open THEN p_now ELSE n.delivered_at END,
               settled_at = CASE WHEN old.open THEN p_now ELSE n.settled_at END,
               lease_until = CASE WHEN old.open THEN NULL ELSE n.lease_until END,
               provider = CASE WHEN old.open THEN p_provider ELSE n.provider END,
               provider_message_id = CASE WHEN old.open THEN p_message_id ELSE n.provider_message_id END,
               last_error = CASE WHEN old.open THEN NULL ELSE n.last_error END
          FROM old
         WHERE n.id = old.id
        RETURNING n.id, n.tenant_id, n.attempts, old.open AS changed
    ), recorded AS (
        INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
                                           finished_at, outcome, provider_message_id, http_status, error,
                                           possible_duplicate)
        SELECT id, tenant_id, attempts, p_provider, p_started, p_now, 'accepted', p_message_id,
               p_http_status, NULL, p_possible_duplicate
          FROM settled
    )
    SELECT settled.changed INTO changed FROM settled;
    RETURN changed;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_settle_delivered_batch(p_rows jsonb, p_now timestamptz)
RETURNS TABLE (idx integer, changed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(
                 idx integer, tenant_id text, id bigint, provider text, started_at timestamptz,
                 message_id text, http_status integer, possible_duplicate boolean)
             ORDER BY x.id, x.idx
    LOOP
        idx := r.idx;
        changed := owed_settle_delivered(r.tenant_id, r.id, r.provider, r.started_at, p_now, r.message_id,
                                         r.http_status, r.possible_duplicate);
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd

ALTER TABLE owed_notifications DROP COLUMN claim_seq;
