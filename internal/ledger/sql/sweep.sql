-- The sweep: the sweeper's statements over every tenant's owed rows. The
-- sweep leases the rows falling due (pending to leased), publishes a queue
-- message for each, marks the published rows queued, releases what it
-- could not publish, republishes rows whose message was lost (their lease
-- ran out), and expires rows past their expiry. internal/ledger is the only
-- caller, and its calls in queries.sql explain each condition.
--
-- Each statement is a SECURITY DEFINER function owned by owed_definer, and
-- the runtime role may EXECUTE exactly these: each returns only the columns
-- its caller reads (the lease: a row's id, tenant, due time and
-- generation, never its recipient or payload), and search_path is pinned,
-- pg_temp last, so a caller cannot put its own objects, temporary tables
-- included, in front of the tables (roles.sql says why pg_temp is named). Parameters
-- named p_now are the injected clock (NULL: the database's); durations are
-- in seconds.

-- owed_sweep_lease_sql is the text of the lease, in three slices:
--   1  pending rows due by the publish-ahead horizon, after a (due_at, id)
--      cursor, oldest first;
--   2  rows leased, queued or sending whose lease ran out (a lost message,
--      a dead worker), oldest first;
--   other  both at once.
-- It sets each row leased until now + $2 and adds one to the row's queue
-- generation when the row was published before (a republish). One text
-- serves owed_sweep_lease, which runs it, owed_sweep_explain_lease, which
-- runs it under EXPLAIN ANALYZE (its caller rolls back), and
-- owed_sweep_lease_due, so the plan an operator reads is the plan of the
-- statement the sweep runs. Parameters: $1 now (NULL: the database's), $2
-- the lease and $3 the publish-ahead window in seconds, $4 the limit, $5
-- and $6 the pending slice's (due_at, id) cursor. It is the definer's
-- own: the runtime role cannot run it.
CREATE FUNCTION owed_sweep_lease_sql(p_slice integer) RETURNS text
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
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
ALTER FUNCTION owed_sweep_lease_sql(integer) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_lease_sql(integer) FROM PUBLIC;

-- owed_sweep_lease runs one slice of the lease and returns the rows it
-- leased.
CREATE FUNCTION owed_sweep_lease(p_slice integer, p_now timestamptz, p_for double precision,
                                 p_ahead double precision, p_limit integer, p_after_due timestamptz,
                                 p_after_id bigint)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, republish boolean, queue_generation integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN QUERY EXECUTE owed_sweep_lease_sql(p_slice)
        USING p_now, p_for, p_ahead, p_limit, p_after_due, p_after_id;
END
$$;
ALTER FUNCTION owed_sweep_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) TO owed_runtime;

-- owed_sweep_explain_lease runs one slice under EXPLAIN (ANALYZE, BUFFERS)
-- and returns the plan; it leases what the slice would, so its caller
-- (ledger.ExplainLease) rolls the transaction back.
CREATE FUNCTION owed_sweep_explain_lease(p_slice integer, p_now timestamptz, p_for double precision,
                                         p_ahead double precision, p_limit integer, p_after_due timestamptz,
                                         p_after_id bigint)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    doc json;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || owed_sweep_lease_sql(p_slice)
        INTO doc USING p_now, p_for, p_ahead, p_limit, p_after_due, p_after_id;
    RETURN doc;
END
$$;
ALTER FUNCTION owed_sweep_explain_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_explain_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_explain_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) TO owed_runtime;

-- owed_sweep_lease_due is the pending slice bounded by the backpressure cap
-- as well: in one call it counts the rows a live lease holds by the
-- publish-ahead horizon (up to the cap, as owed_sweep_survey counts them)
-- and leases at most the limit, never more than the cap minus that count,
-- oldest first after the cursor. Every row it returns carries the count,
-- and it returns one row of the count alone when it leased nothing, so a
-- run that was held back still learns why. It is the fast path's lease,
-- run when owed_due wakes the sweeper (due_notify.sql).
CREATE FUNCTION owed_sweep_lease_due(p_now timestamptz, p_for double precision, p_ahead double precision,
                                     p_limit integer, p_after_due timestamptz, p_after_id bigint,
                                     p_capacity integer)
RETURNS TABLE (held bigint, id bigint, tenant_id text, due_at timestamptz, republish boolean,
               queue_generation integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
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
ALTER FUNCTION owed_sweep_lease_due(timestamptz, double precision, double precision, integer, timestamptz, bigint, integer) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_lease_due(timestamptz, double precision, double precision, integer, timestamptz, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_lease_due(timestamptz, double precision, double precision, integer, timestamptz, bigint, integer) TO owed_runtime;

-- owed_sweep_survey is what a sweep run decides from: how many rows a live
-- lease holds by the horizon (counted up to p_count_up_to), whether a
-- pending row or a lapsed lease is waiting, and the oldest due time still
-- owed, as of asked_at.
CREATE FUNCTION owed_sweep_survey(p_now timestamptz, p_count_up_to integer, p_ahead double precision)
RETURNS TABLE (outstanding bigint, pending boolean, requeues boolean, oldest_due_at timestamptz,
               asked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
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
ALTER FUNCTION owed_sweep_survey(timestamptz, integer, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_survey(timestamptz, integer, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_survey(timestamptz, integer, double precision) TO owed_runtime;

-- owed_sweep_leasable says whether the lease would find a row now.
CREATE FUNCTION owed_sweep_leasable(p_now timestamptz, p_ahead double precision) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT EXISTS (SELECT 1 FROM owed_notifications
                WHERE settled_at IS NULL
                  AND due_at <= coalesce($1, now()) + make_interval(secs => $2)
                  AND (expires_at IS NULL OR expires_at > coalesce($1, now()))
                  AND (state = 'pending' OR lease_until <= coalesce($1, now())))
$$;
ALTER FUNCTION owed_sweep_leasable(timestamptz, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_leasable(timestamptz, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_leasable(timestamptz, double precision) TO owed_runtime;

-- owed_sweep_expire settles as expired up to p_limit owed rows past their
-- expiry, soonest first, skipping a row a live claim is sending (its
-- worker settles it) and rows another transaction has locked.
CREATE FUNCTION owed_sweep_expire(p_now timestamptz, p_limit integer) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
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
ALTER FUNCTION owed_sweep_expire(timestamptz, integer) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_expire(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_expire(timestamptz, integer) TO owed_runtime;

-- owed_sweep_mark_queued marks the leased rows the sweep published: queued,
-- published now, and due for a republish p_requeue_after seconds after the
-- later of now and the row's due time, should no worker claim it.
CREATE FUNCTION owed_sweep_mark_queued(p_ids bigint[], p_now timestamptz, p_requeue_after double precision)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
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
ALTER FUNCTION owed_sweep_mark_queued(bigint[], timestamptz, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_mark_queued(bigint[], timestamptz, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_mark_queued(bigint[], timestamptz, double precision) TO owed_runtime;

-- owed_sweep_release hands back, pending, the leased rows the sweep could
-- not publish.
CREATE FUNCTION owed_sweep_release(p_ids bigint[], p_now timestamptz) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH released AS (
    UPDATE owed_notifications n
       SET state = 'pending', lease_until = NULL, updated_at = coalesce($2, now())
      FROM (SELECT id FROM owed_notifications WHERE id = ANY($1) AND state = 'leased' ORDER BY id FOR UPDATE) l
     WHERE n.id = l.id AND n.state = 'leased'
    RETURNING 1
)
SELECT count(*) FROM released
$$;
ALTER FUNCTION owed_sweep_release(bigint[], timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_release(bigint[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_release(bigint[], timestamptz) TO owed_runtime;

-- owed_sweep_set_aside settles as failed a row the sweep leased and cannot
-- publish (its message cannot be built), with the reason on the row.
CREATE FUNCTION owed_sweep_set_aside(p_id bigint, p_now timestamptz, p_reason text) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH failed AS (
    UPDATE owed_notifications
       SET state = 'failed', settled_at = coalesce($2, now()), lease_until = NULL,
           last_error = $3, updated_at = coalesce($2, now())
     WHERE id = $1 AND state = 'leased'
    RETURNING 1
)
SELECT count(*) FROM failed
$$;
ALTER FUNCTION owed_sweep_set_aside(bigint, timestamptz, text) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_set_aside(bigint, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_set_aside(bigint, timestamptz, text) TO owed_runtime;
