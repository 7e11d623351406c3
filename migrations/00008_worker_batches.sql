-- Batched forms of the worker's two hot statements, so concurrent workers
-- share one transaction (and one WAL flush) instead of paying one each: the
-- trade River makes with its batched fetch and completer. Each row is
-- handled by owed_claim or owed_settle_delivered under its own tenant's
-- scope, so row-level security still sees one tenant per statement; a batch
-- only shares the commit. Rows are taken in id order so two batches that
-- touch the same rows lock them in the same order and cannot deadlock.

-- +goose Up
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

-- +goose Down
DROP FUNCTION owed_claim_batch(jsonb, timestamptz, timestamptz, timestamptz);
DROP FUNCTION owed_settle_delivered_batch(jsonb, timestamptz);
