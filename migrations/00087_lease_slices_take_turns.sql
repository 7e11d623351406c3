-- A lease slice takes a transaction-level advisory lock before its
-- statement, so slices run one at a time across every sweeper and each
-- reads what the previous one left (internal/ledger/sql/sweep.sql says
-- why, in owed_sweep_lease_fair_queued). Concurrent slices picked the same
-- oldest rows, and each row another slice had leased and committed since
-- the statement began was re-checked by PostgreSQL's EvalPlanQual, which
-- built a second copy of the slice's whole plan: 27 % of the sweeper's
-- CPU in a 40,000-row bench/e2e run. Same signature, same answers.

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
    -- One slice at a time across every sweeper: a cron run, a top-up and
    -- another replica's run would otherwise pick the same oldest rows.
    -- Rows the other slice still holds are skipped (SKIP LOCKED), but a
    -- row it leased and committed after this statement's snapshot was
    -- re-checked (PostgreSQL's EvalPlanQual), which built a second copy
    -- of the whole slice's plan, every CTE across every partition, once
    -- per statement that met one: 27 % of the sweeper's CPU in a
    -- 40,000-row bench/e2e run. Taken before the slice's statement, the
    -- lock gives it a snapshot taken after the previous slice committed,
    -- so it reads what that slice left. The lock is the transaction's,
    -- released at the commit that follows the lease; an idle sweep (the
    -- check above) never takes it.
    PERFORM pg_advisory_xact_lock(hashtext('owed_sweep_lease'));
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
REVOKE owed_definer FROM CURRENT_USER;
