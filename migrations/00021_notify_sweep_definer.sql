-- The fast path's two cross-tenant statements (internal/ledger/notifysweep.go)
-- as SECURITY DEFINER functions owned by owed_definer, like the sweep's in
-- migrations/00019: the runtime role runs these and nothing wider.
--
-- owed_sweep_lease_due is the pending slice of owed_sweep_lease bounded by
-- the backpressure cap as well. In one call it counts the rows a live lease
-- holds by the publish-ahead horizon (counted up to the cap, as
-- owed_sweep_survey counts them) and leases at most the limit, never more
-- than the cap minus that count, oldest first after the cursor. It answers
-- the count on every row, and one row of the count alone when it leased
-- nothing, so a run that was held back still learns why.
--
-- owed_sweep_set_aside settles as failed a row the sweep leased and cannot
-- publish (its message cannot be built), with the reason on the row.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION owed_sweep_lease_due(p_now timestamptz, p_for double precision, p_ahead double precision,
                                     p_limit integer, p_after_due timestamptz, p_after_id bigint,
                                     p_capacity integer)
RETURNS TABLE (held bigint, id bigint, tenant_id text, due_at timestamptz, republish boolean,
               queue_generation integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    n bigint;
    room integer;
BEGIN
    SELECT count(*) INTO n
      FROM (SELECT FROM owed_notifications o
             WHERE o.settled_at IS NULL
               AND o.due_at <= coalesce(p_now, now()) + make_interval(secs => p_ahead)
               AND o.state <> 'pending' AND o.lease_until > coalesce(p_now, now())
             LIMIT p_capacity) h;
    room := least(p_limit::bigint, p_capacity::bigint - n)::integer;
    IF room > 0 THEN
        RETURN QUERY EXECUTE 'WITH l AS (' || owed_sweep_lease_sql(1) || ') SELECT $7::bigint, l.* FROM l'
            USING p_now, p_for, p_ahead, room, p_after_due, p_after_id, n;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY SELECT n, NULL::bigint, NULL::text, NULL::timestamptz, NULL::boolean, NULL::integer;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_set_aside(p_id bigint, p_now timestamptz, p_reason text) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH failed AS (
    UPDATE owed_notifications
       SET state = 'failed', settled_at = coalesce($2, now()), lease_until = NULL,
           last_error = $3, updated_at = coalesce($2, now())
     WHERE id = $1 AND state = 'leased'
    RETURNING 1
)
SELECT count(*) FROM failed
$$;
-- +goose StatementEnd

CALL owed_definer_takes_functions(ARRAY['owed_sweep_lease_due', 'owed_sweep_set_aside']);

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
DROP FUNCTION owed_sweep_set_aside(bigint, timestamptz, text);
DROP FUNCTION owed_sweep_lease_due(timestamptz, double precision, double precision, integer, timestamptz, bigint, integer);
REVOKE owed_definer FROM CURRENT_USER;
