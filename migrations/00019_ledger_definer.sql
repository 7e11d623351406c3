-- The ledger's and the materialiser's cross-tenant statements as SECURITY
-- DEFINER functions owned by owed_definer (migrations/00018).
--
-- The sweeper's claim over every tenant's owed rows and its bookkeeping, the
-- backlog and delivery aggregates, the look-up of a row's tenant by id and
-- the materialiser's read of owed_items were statements the application
-- role ran after setting owed.bypass_rls. Each is now one function, and the
-- runtime role may run exactly these and nothing wider: each returns only
-- the columns its caller reads (the lease: a row's id, tenant, due time and
-- generation, never its recipient or payload), and search_path is pinned so
-- a caller cannot put its own objects in front of the tables. EXECUTE is
-- revoked from PUBLIC and granted to owed_runtime alone; owed_apps runs none
-- of them. internal/ledger (sweep.go, lookup.go, redrive.go) and
-- internal/materialise (sql.go) are their only callers, and the comments on
-- the statements there explain each condition.
--
-- The lease's three slices share one text, owed_sweep_lease_sql, which
-- owed_sweep_lease runs and owed_sweep_explain_lease runs under EXPLAIN
-- ANALYZE (its caller rolls the transaction back), so the plan an operator
-- reads is the plan of the statement the sweep runs. Parameters: $1 now (NULL:
-- the database's), $2 the lease and $3 the publish-ahead window in seconds,
-- $4 the limit, $5 and $6 the pending slice's (due_at, id) cursor.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION owed_sweep_lease_sql(p_slice integer) RETURNS text
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT '
UPDATE owed_notifications n
   SET state = ''leased'', lease_until = coalesce($1::timestamptz, now()) + make_interval(secs => $2),
       queue_generation = n.queue_generation + CASE WHEN n.published_at IS NULL THEN 0 ELSE 1 END,
       updated_at = coalesce($1::timestamptz, now())
  FROM (SELECT id FROM owed_notifications
         WHERE settled_at IS NULL
           AND due_at <= coalesce($1::timestamptz, now()) + make_interval(secs => $3)
           AND (expires_at IS NULL OR expires_at > coalesce($1::timestamptz, now()))'
    || CASE p_slice
         WHEN 1 THEN '
           AND state = ''pending'' AND (due_at, id) > ($5::timestamptz, $6::bigint)'
         WHEN 2 THEN '
           AND state <> ''pending'' AND lease_until <= coalesce($1::timestamptz, now())'
         ELSE '
           AND (state = ''pending'' OR lease_until <= coalesce($1::timestamptz, now()))'
       END || '
         ORDER BY due_at, id
         LIMIT $4
         FOR UPDATE SKIP LOCKED) owed
 WHERE n.id = owed.id
RETURNING n.id, n.tenant_id, n.due_at, n.published_at IS NOT NULL, n.queue_generation'
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_lease(p_slice integer, p_now timestamptz, p_for double precision,
                                 p_ahead double precision, p_limit integer, p_after_due timestamptz,
                                 p_after_id bigint)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, republish boolean, queue_generation integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    RETURN QUERY EXECUTE owed_sweep_lease_sql(p_slice)
        USING p_now, p_for, p_ahead, p_limit, p_after_due, p_after_id;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_explain_lease(p_slice integer, p_now timestamptz, p_for double precision,
                                         p_ahead double precision, p_limit integer, p_after_due timestamptz,
                                         p_after_id bigint)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    doc json;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || owed_sweep_lease_sql(p_slice)
        INTO doc USING p_now, p_for, p_ahead, p_limit, p_after_due, p_after_id;
    RETURN doc;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_survey(p_now timestamptz, p_count_up_to integer, p_ahead double precision)
RETURNS TABLE (outstanding bigint, pending boolean, requeues boolean, oldest_due_at timestamptz,
               asked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT (SELECT count(*) FROM (SELECT FROM owed_notifications
                               WHERE settled_at IS NULL
                                 AND due_at <= coalesce($1, now()) + make_interval(secs => $3)
                                 AND state <> 'pending' AND lease_until > coalesce($1, now())
                               LIMIT $2) held),
       EXISTS (SELECT FROM owed_notifications
                WHERE settled_at IS NULL
                  AND due_at <= coalesce($1, now()) + make_interval(secs => $3)
                  AND (expires_at IS NULL OR expires_at > coalesce($1, now()))
                  AND state = 'pending'),
       EXISTS (SELECT FROM owed_notifications
                WHERE settled_at IS NULL
                  AND due_at <= coalesce($1, now()) + make_interval(secs => $3)
                  AND (expires_at IS NULL OR expires_at > coalesce($1, now()))
                  AND state <> 'pending' AND lease_until <= coalesce($1, now())),
       (SELECT min(due_at) FROM owed_notifications
         WHERE settled_at IS NULL AND due_at <= coalesce($1, now())),
       coalesce($1, now())
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_leasable(p_now timestamptz, p_ahead double precision) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT EXISTS (SELECT 1 FROM owed_notifications
                WHERE settled_at IS NULL
                  AND due_at <= coalesce($1, now()) + make_interval(secs => $2)
                  AND (expires_at IS NULL OR expires_at > coalesce($1, now()))
                  AND (state = 'pending' OR lease_until <= coalesce($1, now())))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_expire(p_now timestamptz, p_limit integer) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH expired AS (
    UPDATE owed_notifications n
       SET state = 'expired', settled_at = coalesce($1, now()), lease_until = NULL,
           updated_at = coalesce($1, now()), last_error = 'expired before it was sent'
      FROM (SELECT id FROM owed_notifications
             WHERE settled_at IS NULL
               AND expires_at <= coalesce($1, now())
               AND (state <> 'sending' OR lease_until <= coalesce($1, now()))
             ORDER BY expires_at
             LIMIT $2
             FOR UPDATE SKIP LOCKED) overdue
     WHERE n.id = overdue.id
    RETURNING 1
)
SELECT count(*) FROM expired
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_mark_queued(p_ids bigint[], p_now timestamptz, p_requeue_after double precision)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH marked AS (
    UPDATE owed_notifications n
       SET state = 'queued', published_at = coalesce($2, now()),
           lease_until = greatest(coalesce($2, now()), n.due_at) + make_interval(secs => $3),
           updated_at = coalesce($2, now())
      FROM (SELECT id FROM owed_notifications WHERE id = ANY($1) AND state = 'leased' ORDER BY id FOR UPDATE) l
     WHERE n.id = l.id AND n.state = 'leased'
    RETURNING 1
)
SELECT count(*) FROM marked
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_release(p_ids bigint[], p_now timestamptz) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH released AS (
    UPDATE owed_notifications n
       SET state = 'pending', lease_until = NULL, updated_at = coalesce($2, now())
      FROM (SELECT id FROM owed_notifications WHERE id = ANY($1) AND state = 'leased' ORDER BY id FOR UPDATE) l
     WHERE n.id = l.id AND n.state = 'leased'
    RETURNING 1
)
SELECT count(*) FROM released
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_ledger_backlog(p_now timestamptz)
RETURNS TABLE (state text, owed bigint, oldest_due_at timestamptz, asked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT state, count(*), min(due_at) FILTER (WHERE due_at <= coalesce($1, now())), coalesce($1, now())
  FROM owed_notifications WHERE settled_at IS NULL GROUP BY state
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_ledger_stats(p_since timestamptz)
RETURNS TABLE (delivered bigint, expired bigint, failed bigint, skipped bigint, cancelled bigint,
               lag_p50 double precision, lag_p95 double precision, lag_max double precision,
               duplicate_rows bigint, possible_duplicates bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT count(*) FILTER (WHERE state = 'delivered'),
       count(*) FILTER (WHERE state = 'expired'),
       count(*) FILTER (WHERE state = 'failed'),
       count(*) FILTER (WHERE state = 'skipped'),
       count(*) FILTER (WHERE state = 'cancelled'),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM delivered_at - due_at))
                FILTER (WHERE state = 'delivered'), 0)::double precision,
       coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM delivered_at - due_at))
                FILTER (WHERE state = 'delivered'), 0)::double precision,
       coalesce(max(extract(epoch FROM delivered_at - due_at)) FILTER (WHERE state = 'delivered'), 0)::double precision,
       (SELECT count(*) FROM (SELECT notification_id FROM owed_notification_attempts
                               WHERE outcome = 'accepted' AND finished_at >= $1
                               GROUP BY notification_id HAVING count(*) > 1) d),
       (SELECT count(*) FROM owed_notification_attempts WHERE possible_duplicate AND finished_at >= $1)
  FROM owed_notifications WHERE settled_at >= $1
$$;
-- +goose StatementEnd

-- An operator names rows by id alone (owedctl notifications get, a dead
-- letter's row): this says whose they are, and nothing else. The row itself
-- is then read, or redriven, in that tenant's own scope.
-- +goose StatementBegin
CREATE FUNCTION owed_ledger_tenants_of(p_ids bigint[]) RETURNS TABLE (id bigint, tenant_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT n.id, n.tenant_id FROM owed_notifications n WHERE n.id = ANY($1)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_materialise_upcoming(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (tenant_id text, recipient text, channel text, kind text, ref_id text, starts_at timestamptz,
               lead_seconds integer, payload jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT i.tenant_id, i.recipient, i.channel, i.kind, i.ref_id, i.starts_at, i.lead_seconds, i.payload
  FROM owed_items i
 WHERE i.starts_at > $1 AND i.starts_at <= $2
 ORDER BY i.tenant_id, i.starts_at, i.id
$$;
-- +goose StatementEnd

-- Each to owed_definer, EXECUTE for owed_runtime alone (migrations/00018);
-- owed_sweep_lease_sql is the definer's own.
CALL owed_definer_takes_functions(ARRAY['owed_sweep_lease', 'owed_sweep_explain_lease', 'owed_sweep_survey',
    'owed_sweep_leasable', 'owed_sweep_expire', 'owed_sweep_mark_queued', 'owed_sweep_release', 'owed_ledger_backlog',
    'owed_ledger_stats', 'owed_ledger_tenants_of', 'owed_materialise_upcoming']);

-- +goose Down
-- Dropping a function takes membership of its owner, for these statements
-- alone.
GRANT owed_definer TO CURRENT_USER;
DROP FUNCTION owed_materialise_upcoming(timestamptz, timestamptz);
DROP FUNCTION owed_ledger_tenants_of(bigint[]);
DROP FUNCTION owed_ledger_stats(timestamptz);
DROP FUNCTION owed_ledger_backlog(timestamptz);
DROP FUNCTION owed_sweep_release(bigint[], timestamptz);
DROP FUNCTION owed_sweep_mark_queued(bigint[], timestamptz, double precision);
DROP FUNCTION owed_sweep_expire(timestamptz, integer);
DROP FUNCTION owed_sweep_leasable(timestamptz, double precision);
DROP FUNCTION owed_sweep_survey(timestamptz, integer, double precision);
DROP FUNCTION owed_sweep_explain_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint);
DROP FUNCTION owed_sweep_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint);
DROP FUNCTION owed_sweep_lease_sql(integer);
REVOKE owed_definer FROM CURRENT_USER;
