-- Settles many accepted sends in one statement, so concurrent workers share
-- one transaction (and one WAL flush) instead of paying one each: the same
-- trade River's batched completer makes. Each row is settled by
-- owed_settle_delivered under its own tenant's scope, so row-level security
-- still sees one tenant at a time; the batch only shares the commit.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION owed_settle_delivered_batch(p_rows jsonb, p_now timestamptz)
RETURNS TABLE (id bigint, changed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(
                 tenant_id text, id bigint, provider text, started_at timestamptz, message_id text,
                 http_status integer, possible_duplicate boolean)
    LOOP
        id := r.id;
        changed := owed_settle_delivered(r.tenant_id, r.id, r.provider, r.started_at, p_now, r.message_id,
                                         r.http_status, r.possible_duplicate);
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION owed_settle_delivered_batch(jsonb, timestamptz);
