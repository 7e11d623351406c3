-- The worker's claim reads the undeliverable mark of each row it takes
-- (issue 15's e2e regression): before, every send read owed_undeliverable
-- in a transaction of its own (ledger.LookupUndeliverable) after the claim
-- had committed, one more transaction per delivery. owed_claim_batch_marked
-- is owed_claim_batch (migrations/00012) with the mark of each taken row's
-- recipient on its channel in its tenant beside it: the one statement and
-- commit the batch already costs. The worker uses the mark when the row's
-- recipient is the address it sends to (the recipient resolver), and looks
-- the resolved address up as before when a resolver maps it to another.
--
-- Expand-only: a new function; owed_claim_batch stays for the previous
-- release. Like owed_claim_batch it runs as its caller, the runtime role,
-- each row in its own tenant's scope: the scope is set before the row's
-- query, so both owed_claim and the mark's read see that tenant alone.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION owed_claim_batch_marked(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
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

-- +goose Down
DROP FUNCTION owed_claim_batch_marked(jsonb, timestamptz, timestamptz, timestamptz);
