-- The sweep's statements on the partitioned ledger keep their plans for the
-- session (docs/performance.md, "The partitioned ledger's cost on the hot
-- path"): the fair lease's slice is prepared once per session and executed
-- (owed_sweep_lease_fair_queued), and the SQL functions the sweep calls on
-- every run (owed_sweep_survey_fair, owed_sweep_overdue,
-- owed_sweep_expire_rows, owed_sweep_mark_queued, owed_sweep_send_rates,
-- owed_sweep_digests) become PL/pgSQL, whose statements' plans are cached:
-- PostgreSQL 15 plans a SQL function's body again on every call, and each
-- plan read every month's partition with its indexes.
-- +goose Up
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_lease_fair_queued(p_slice integer, p_now timestamptz, p_for double precision,
                                             p_ahead double precision, p_limit integer, p_channels text[],
                                             p_accounts integer[], p_names text[], p_caps integer[],
                                             p_share double precision, p_live_for double precision,
                                             p_not_before boolean, p_requeue_after double precision)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, republish boolean, queue_generation integer,
               account integer, state text, ord bigint, requeue boolean, outstanding integer, room integer,
               held integer, more boolean, asked_at timestamptz, not_before timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    r record;
    err text;
    v_sql text;
    v_name text;
BEGIN
    -- Nothing to lease (the sweep's most frequent answer): a static
    -- statement, planned once per session, answers it without planning
    -- the slice's. The slice reads no more than this, so it would find
    -- nothing either; no account's rows are counted. Pending rows and
    -- rows whose lease ran out (or a hand-back whose not-before is near)
    -- are asked apart, each through its own partial index: the earliest
    -- pending due time, read from owed_notifications_owed_due in due
    -- order (it steps over rows in flight only), and
    -- owed_notifications_in_flight by the lease's end (an unsettled row
    -- that is not pending is leased, queued or sending; a hand-back's
    -- lease ends at its not-before). One EXISTS over both, joined by OR,
    -- read the whole ledger sequentially on every idle sweep: the planner
    -- expected settled rows' due times to match
    -- (TestIdleLeaseNeverScansTheLedger).
    IF NOT ((p_slice IN (0, 1)
             AND coalesce((SELECT o.due_at FROM owed_notifications o
                            WHERE o.settled_at IS NULL AND o.state = 'pending'
                            ORDER BY o.due_at LIMIT 1)
                          <= coalesce(p_now, now()) + make_interval(secs => p_ahead), false))
            OR (p_slice IN (0, 2)
                AND EXISTS (SELECT FROM owed_notifications o
                             WHERE o.state IN ('leased', 'queued', 'sending')
                               AND o.lease_until <= coalesce(p_now, now())
                                                    + make_interval(secs => CASE WHEN p_not_before THEN p_ahead ELSE 0 END)
                               AND (o.lease_until <= coalesce(p_now, now())
                                    OR (p_not_before AND owed_handed_back(o.state, o.lease_until, o.not_before)))
                               AND o.due_at <= coalesce(p_now, now()) + make_interval(secs => p_ahead)))) THEN
        RETURN;
    END IF;
    -- The slice's statement is prepared once per session, under a name
    -- its text gives, and executed with the call's values: planning it
    -- reads every partition of the ledger (each with its indexes and
    -- checks), which cost more than running it once the ledger had a
    -- dozen months, and a prepared statement keeps its plan between calls
    -- (docs/performance.md, "The partitioned ledger's cost on the hot
    -- path"). EXECUTE takes no parameters, so the values go in as
    -- literals, read back by the types the PREPARE declares.
    v_sql := owed_sweep_fair_lease_sql(p_slice, 'lease', p_not_before);
    v_name := 'owed_sweep_lease_' || md5(v_sql);
    BEGIN
        IF NOT EXISTS (SELECT FROM pg_prepared_statements ps WHERE ps.name = v_name) THEN
            EXECUTE format('PREPARE %I (timestamptz, double precision, double precision, integer, text[], '
                           'integer[], text[], integer[], double precision, double precision, bigint, bigint, '
                           'boolean, timestamptz, double precision) AS %s', v_name, v_sql);
        END IF;
        RETURN QUERY EXECUTE format('EXECUTE %I (%L, %L, %L, %L, %L, %L, %L, %L, %L, %L, NULL, NULL, NULL, NULL, %L)',
                                    v_name, p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps,
                                    p_share, p_live_for, p_requeue_after);
        RETURN;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
        RAISE WARNING 'owed_sweep_lease_fair: a row failed the slice (%); leasing its rows one at a time', err;
    END;
    FOR r IN EXECUTE owed_sweep_fair_lease_sql(p_slice, 'pick', p_not_before)
        USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share, p_live_for
    LOOP
        IF r.id IS NULL THEN
            RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::timestamptz, NULL::boolean, NULL::integer, r.a,
                                NULL::text, NULL::bigint, NULL::boolean, r.outstanding, r.quota, r.held, r.more,
                                coalesce(p_now, now()), NULL::timestamptz;
            CONTINUE;
        END IF;
        BEGIN
            RETURN QUERY EXECUTE owed_sweep_fair_lease_sql(p_slice, 'row', p_not_before)
                USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share,
                      p_live_for, r.id, r.ord, r.requeue, r.not_before, p_requeue_after;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
            IF owed_sweep_settle_failed(r.id, p_now, 'set aside by the sweep: ' || err) THEN
                RETURN QUERY SELECT r.id, NULL::text, NULL::timestamptz, NULL::boolean, NULL::integer, r.a,
                                    'failed'::text, r.ord, r.requeue, NULL::integer, NULL::integer, NULL::integer,
                                    NULL::boolean, coalesce(p_now, now()), NULL::timestamptz;
            END IF;
        END;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_survey_fair(p_now timestamptz, p_ahead double precision, p_live_for double precision,
                                       p_channels text[], p_accounts integer[], p_names text[],
                                       p_count_up_to integer)
RETURNS TABLE (outstanding integer[], pending boolean, requeues boolean, oldest_owed_age_s double precision,
               asked_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH clock AS (
        SELECT coalesce($1, now()) AS now, coalesce($1, now()) + make_interval(secs => $2) AS horizon,
               coalesce($1, now()) + make_interval(secs => $3) AS live_until
    ), flight AS (
        SELECT f.* FROM clock c, owed_sweep_in_flight(c.now, c.horizon, c.live_until, $4, $5, $7) f
    )
    SELECT (SELECT array_agg(coalesce((SELECT sum(f.due_by_horizon) FROM flight f WHERE f.account = a), 0)::integer
                             ORDER BY a)
              FROM generate_subscripts($6, 1) a),
           coalesce((SELECT o.due_at FROM owed_notifications o
                      WHERE o.settled_at IS NULL AND o.state = 'pending'
                        AND (o.expires_at IS NULL OR o.expires_at > c.now)
                      ORDER BY o.due_at LIMIT 1) <= c.horizon, false),
           EXISTS (SELECT FROM owed_notifications o
                    WHERE o.state IN ('leased', 'queued', 'sending') AND o.lease_until <= c.horizon
                      AND (o.lease_until <= c.now OR owed_handed_back(o.state, o.lease_until, o.not_before))
                      AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)),
           (SELECT extract(epoch FROM c.now - o.due_at)::double precision FROM owed_notifications o
             WHERE o.settled_at IS NULL AND o.due_at > '-infinity' AND o.due_at <= c.now
             ORDER BY o.due_at LIMIT 1),
           c.now
      FROM clock c;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_overdue(p_now timestamptz, p_limit integer) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT id FROM owed_notifications
     WHERE settled_at IS NULL
       AND expires_at <= coalesce(p_now, now())
       AND (state <> 'sending' OR lease_until <= coalesce(p_now, now()))
     ORDER BY expires_at
     LIMIT p_limit
       FOR UPDATE SKIP LOCKED;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_expire_rows(p_ids bigint[], p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v bigint;
BEGIN
    WITH expired AS (
        UPDATE owed_notifications
           SET state = 'expired', settled_at = coalesce(p_now, now()), lease_until = NULL,
               updated_at = coalesce(p_now, now()), last_error = 'expired before it was sent'
         WHERE id = ANY (p_ids) AND settled_at IS NULL
        RETURNING 1
    )
    SELECT count(*) INTO v FROM expired;
    RETURN v;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_mark_queued(p_ids bigint[], p_now timestamptz, p_requeue_after double precision)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v bigint;
BEGIN
    WITH marked AS (
        UPDATE owed_notifications n
           SET state = 'queued', published_at = coalesce($2, now()),
               lease_until = greatest(coalesce($2, now()), n.due_at, n.not_before) + make_interval(secs => $3),
               updated_at = coalesce($2, now())
          FROM (SELECT id FROM owed_notifications WHERE id = ANY($1) AND state = 'leased' ORDER BY id FOR UPDATE) l
         WHERE n.id = l.id AND n.state = 'leased'
        RETURNING 1
    )
    SELECT count(*) INTO v FROM marked;
    RETURN v;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_send_rates(p_now timestamptz, p_window double precision, p_count_up_to integer)
RETURNS TABLE (provider text, sends bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT split_part(a.provider, ':', 1), count(*)
      FROM (SELECT provider FROM owed_notification_attempts
             WHERE finished_at > coalesce($1, now()) - make_interval(secs => $2)
               AND finished_at <= coalesce($1, now())
             LIMIT $3) a
     GROUP BY 1;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_digests(p_ids bigint[]) RETURNS TABLE (id bigint, digest_id bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT n.id, n.digest_id FROM owed_notifications n WHERE n.id = ANY ($1) AND n.digest_id IS NOT NULL;
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_lease_fair_queued(p_slice integer, p_now timestamptz, p_for double precision,
                                             p_ahead double precision, p_limit integer, p_channels text[],
                                             p_accounts integer[], p_names text[], p_caps integer[],
                                             p_share double precision, p_live_for double precision,
                                             p_not_before boolean, p_requeue_after double precision)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, republish boolean, queue_generation integer,
               account integer, state text, ord bigint, requeue boolean, outstanding integer, room integer,
               held integer, more boolean, asked_at timestamptz, not_before timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    r record;
    err text;
BEGIN
    -- Nothing to lease (the sweep's most frequent answer): a static
    -- statement, planned once per session, answers it without planning
    -- the slice's. The slice reads no more than this, so it would find
    -- nothing either; no account's rows are counted. Pending rows and
    -- rows whose lease ran out (or a hand-back whose not-before is near)
    -- are asked apart, each through its own partial index: the earliest
    -- pending due time, read from owed_notifications_owed_due in due
    -- order (it steps over rows in flight only), and
    -- owed_notifications_in_flight by the lease's end (an unsettled row
    -- that is not pending is leased, queued or sending; a hand-back's
    -- lease ends at its not-before). One EXISTS over both, joined by OR,
    -- read the whole ledger sequentially on every idle sweep: the planner
    -- expected settled rows' due times to match
    -- (TestIdleLeaseNeverScansTheLedger).
    IF NOT ((p_slice IN (0, 1)
             AND coalesce((SELECT o.due_at FROM owed_notifications o
                            WHERE o.settled_at IS NULL AND o.state = 'pending'
                            ORDER BY o.due_at LIMIT 1)
                          <= coalesce(p_now, now()) + make_interval(secs => p_ahead), false))
            OR (p_slice IN (0, 2)
                AND EXISTS (SELECT FROM owed_notifications o
                             WHERE o.state IN ('leased', 'queued', 'sending')
                               AND o.lease_until <= coalesce(p_now, now())
                                                    + make_interval(secs => CASE WHEN p_not_before THEN p_ahead ELSE 0 END)
                               AND (o.lease_until <= coalesce(p_now, now())
                                    OR (p_not_before AND owed_handed_back(o.state, o.lease_until, o.not_before)))
                               AND o.due_at <= coalesce(p_now, now()) + make_interval(secs => p_ahead)))) THEN
        RETURN;
    END IF;
    BEGIN
        RETURN QUERY EXECUTE owed_sweep_fair_lease_sql(p_slice, 'lease', p_not_before)
            USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share, p_live_for,
                  NULL::bigint, NULL::bigint, NULL::boolean, NULL::timestamptz, p_requeue_after;
        RETURN;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
        RAISE WARNING 'owed_sweep_lease_fair: a row failed the slice (%); leasing its rows one at a time', err;
    END;
    FOR r IN EXECUTE owed_sweep_fair_lease_sql(p_slice, 'pick', p_not_before)
        USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share, p_live_for
    LOOP
        IF r.id IS NULL THEN
            RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::timestamptz, NULL::boolean, NULL::integer, r.a,
                                NULL::text, NULL::bigint, NULL::boolean, r.outstanding, r.quota, r.held, r.more,
                                coalesce(p_now, now()), NULL::timestamptz;
            CONTINUE;
        END IF;
        BEGIN
            RETURN QUERY EXECUTE owed_sweep_fair_lease_sql(p_slice, 'row', p_not_before)
                USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share,
                      p_live_for, r.id, r.ord, r.requeue, r.not_before, p_requeue_after;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
            IF owed_sweep_settle_failed(r.id, p_now, 'set aside by the sweep: ' || err) THEN
                RETURN QUERY SELECT r.id, NULL::text, NULL::timestamptz, NULL::boolean, NULL::integer, r.a,
                                    'failed'::text, r.ord, r.requeue, NULL::integer, NULL::integer, NULL::integer,
                                    NULL::boolean, coalesce(p_now, now()), NULL::timestamptz;
            END IF;
        END;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_survey_fair(p_now timestamptz, p_ahead double precision, p_live_for double precision,
                                       p_channels text[], p_accounts integer[], p_names text[],
                                       p_count_up_to integer)
RETURNS TABLE (outstanding integer[], pending boolean, requeues boolean, oldest_owed_age_s double precision,
               asked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH clock AS (
    SELECT coalesce($1, now()) AS now, coalesce($1, now()) + make_interval(secs => $2) AS horizon,
           coalesce($1, now()) + make_interval(secs => $3) AS live_until
), flight AS (
    SELECT f.* FROM clock c, owed_sweep_in_flight(c.now, c.horizon, c.live_until, $4, $5, $7) f
)
SELECT (SELECT array_agg(coalesce((SELECT sum(f.due_by_horizon) FROM flight f WHERE f.account = a), 0)::integer
                         ORDER BY a)
          FROM generate_subscripts($6, 1) a),
       coalesce((SELECT o.due_at FROM owed_notifications o
                  WHERE o.settled_at IS NULL AND o.state = 'pending'
                    AND (o.expires_at IS NULL OR o.expires_at > c.now)
                  ORDER BY o.due_at LIMIT 1) <= c.horizon, false),
       EXISTS (SELECT FROM owed_notifications o
                WHERE o.state IN ('leased', 'queued', 'sending') AND o.lease_until <= c.horizon
                  AND (o.lease_until <= c.now OR owed_handed_back(o.state, o.lease_until, o.not_before))
                  AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)),
       (SELECT extract(epoch FROM c.now - o.due_at)::double precision FROM owed_notifications o
         WHERE o.settled_at IS NULL AND o.due_at > '-infinity' AND o.due_at <= c.now
         ORDER BY o.due_at LIMIT 1),
       c.now
  FROM clock c
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_overdue(p_now timestamptz, p_limit integer) RETURNS SETOF bigint
LANGUAGE sql AS $$
SELECT id FROM owed_notifications
 WHERE settled_at IS NULL
   AND expires_at <= coalesce(p_now, now())
   AND (state <> 'sending' OR lease_until <= coalesce(p_now, now()))
 ORDER BY expires_at
 LIMIT p_limit
   FOR UPDATE SKIP LOCKED
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_expire_rows(p_ids bigint[], p_now timestamptz) RETURNS bigint
LANGUAGE sql AS $$
WITH expired AS (
    UPDATE owed_notifications
       SET state = 'expired', settled_at = coalesce(p_now, now()), lease_until = NULL,
           updated_at = coalesce(p_now, now()), last_error = 'expired before it was sent'
     WHERE id = ANY (p_ids) AND settled_at IS NULL
    RETURNING 1
)
SELECT count(*) FROM expired
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_mark_queued(p_ids bigint[], p_now timestamptz, p_requeue_after double precision)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH marked AS (
    UPDATE owed_notifications n
       SET state = 'queued', published_at = coalesce($2, now()),
           lease_until = greatest(coalesce($2, now()), n.due_at, n.not_before) + make_interval(secs => $3),
           updated_at = coalesce($2, now())
      FROM (SELECT id FROM owed_notifications WHERE id = ANY($1) AND state = 'leased' ORDER BY id FOR UPDATE) l
     WHERE n.id = l.id AND n.state = 'leased'
    RETURNING 1
)
SELECT count(*) FROM marked
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_send_rates(p_now timestamptz, p_window double precision, p_count_up_to integer)
RETURNS TABLE (provider text, sends bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT split_part(a.provider, ':', 1), count(*)
  FROM (SELECT provider FROM owed_notification_attempts
         WHERE finished_at > coalesce($1, now()) - make_interval(secs => $2)
           AND finished_at <= coalesce($1, now())
         LIMIT $3) a
 GROUP BY 1
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_digests(p_ids bigint[]) RETURNS TABLE (id bigint, digest_id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT n.id, n.digest_id FROM owed_notifications n WHERE n.id = ANY ($1) AND n.digest_id IS NOT NULL
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;
