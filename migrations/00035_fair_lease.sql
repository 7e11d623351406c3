-- The fair lease (issue 25): each sweep slice shares its capacity between
-- the tenants with rows owed and between provider accounts, instead of one
-- global oldest-first line under one backpressure cap; the cap is each
-- account's, and a paused tenant or a held account takes none. Every
-- answer carries the database's now, which the sweep counts publish delays
-- from. internal/ledger/sql/sweep.sql explains each function; the two
-- indexes they read are migrations/00034's.
--
-- Expand-only: new functions beside the ones the previous release calls
-- (owed_sweep_lease, owed_sweep_lease_due, owed_sweep_survey,
-- owed_sweep_leasable stay as they were). owed_sweep_expire, which both
-- releases call, is replaced with a body that sets one failing row aside
-- instead of failing every run's expiry; its answer is the same. Replacing
-- the definer's function takes membership of owed_definer for the
-- statement.

-- +goose Up

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_account_of(p_channel text, p_channels text[], p_accounts integer[]) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
SELECT coalesce(p_accounts[array_position(p_channels, p_channel)], 1)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_open_accounts(p_names text[]) RETURNS SETOF integer
LANGUAGE sql STABLE AS $$
SELECT a FROM generate_subscripts(p_names, 1) a
 WHERE NOT EXISTS (SELECT FROM owed_provider_pace p
                    WHERE p.held_at IS NOT NULL
                      AND (p.account = p_names[a] OR split_part(p.account, ':', 1) = p_names[a]))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_in_flight(p_now timestamptz, p_horizon timestamptz, p_live_until timestamptz,
                                     p_channels text[], p_accounts integer[], p_limit integer)
RETURNS TABLE (tenant_id text, account integer, due_now bigint, due_by_horizon bigint)
LANGUAGE sql STABLE AS $$
SELECT f.tenant_id, owed_sweep_account_of(f.channel, p_channels, p_accounts),
       count(*) FILTER (WHERE f.due_at <= p_now), count(*)
  FROM (SELECT o.tenant_id, o.channel, o.due_at FROM owed_notifications o
         WHERE o.state IN ('leased', 'queued', 'sending')
           AND o.lease_until > p_now AND o.lease_until <= p_live_until AND o.due_at <= p_horizon
           AND NOT EXISTS (SELECT FROM owed_tenant_pauses tp WHERE tp.tenant_id = o.tenant_id)
         LIMIT p_limit) f
 GROUP BY 1, 2
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_settle_failed(p_id bigint, p_now timestamptz, p_reason text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    reason text := p_reason;
BEGIN
    FOR attempt IN 1..2 LOOP
        BEGIN
            IF attempt = 2 THEN
                UPDATE owed_notifications SET intent_outcome = 'superseded'
                 WHERE id = p_id AND intent IS NOT NULL AND intent_outcome IS NULL;
                IF NOT FOUND THEN
                    RETURN false;
                END IF;
                reason := reason || '; the ' || (SELECT intent FROM owed_notifications WHERE id = p_id)
                          || ' waiting on it could not be applied';
            END IF;
            UPDATE owed_notifications
               SET state = 'failed', settled_at = coalesce(p_now, now()), lease_until = NULL,
                   last_error = left(reason, 2000), updated_at = coalesce(p_now, now())
             WHERE id = p_id AND settled_at IS NULL;
            RETURN FOUND;
        EXCEPTION WHEN OTHERS THEN
            NULL;
        END;
    END LOOP;
    RETURN false;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_overdue(p_now timestamptz, p_limit integer) RETURNS SETOF bigint
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
CREATE FUNCTION owed_sweep_expire_rows(p_ids bigint[], p_now timestamptz) RETURNS bigint
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

REVOKE EXECUTE ON FUNCTION owed_sweep_account_of(text, text[], integer[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_account_of(text, text[], integer[]) TO owed_definer;

REVOKE EXECUTE ON FUNCTION owed_sweep_open_accounts(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_open_accounts(text[]) TO owed_definer;

REVOKE EXECUTE ON FUNCTION owed_sweep_in_flight(timestamptz, timestamptz, timestamptz, text[], integer[], integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_in_flight(timestamptz, timestamptz, timestamptz, text[], integer[], integer) TO owed_definer;

REVOKE EXECUTE ON FUNCTION owed_sweep_settle_failed(bigint, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_settle_failed(bigint, timestamptz, text) TO owed_definer;

REVOKE EXECUTE ON FUNCTION owed_sweep_overdue(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_overdue(timestamptz, integer) TO owed_definer;

REVOKE EXECUTE ON FUNCTION owed_sweep_expire_rows(bigint[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_expire_rows(bigint[], timestamptz) TO owed_definer;

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_fair_lease_sql(p_slice integer, p_part text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $fn$
DECLARE
    -- The instants every part reads: now, the publish-ahead horizon, and
    -- how far a live lease may end.
    clock constant text := '
clock AS MATERIALIZED (
    SELECT coalesce($1::timestamptz, now()) AS now,
           coalesce($1::timestamptz, now()) + make_interval(secs => $3::double precision) AS horizon,
           coalesce($1::timestamptz, now()) + make_interval(secs => $10::double precision) AS live_until)';
    -- A due time a message can carry.
    ok constant text := '(n.due_at >= ''0001-01-01 00:00:00+00''::timestamptz
           AND n.due_at < ''10000-01-01 00:00:00+00''::timestamptz)';
    -- How a leased row changes: leased until now + $2, its next queue
    -- generation when it was published before (a republish); or settled
    -- failed when no message can carry its due time.
    lease_set constant text := '
   SET state = CASE WHEN ' || ok || ' THEN ''leased'' ELSE ''failed'' END,
       lease_until = CASE WHEN ' || ok || ' THEN c.now + make_interval(secs => $2::double precision) END,
       settled_at = CASE WHEN ' || ok || ' THEN NULL ELSE c.now END,
       last_error = CASE WHEN ' || ok || ' THEN n.last_error
                         ELSE ''set aside by the sweep: due_at '' || n.due_at::text
                              || '' is outside 0001-01-01 to 9999-12-31 UTC, so no message can carry it'' END,
       queue_generation = n.queue_generation
                          + CASE WHEN ' || ok || ' AND n.published_at IS NOT NULL THEN 1 ELSE 0 END,
       updated_at = c.now';
    -- The rows of the slice, as the statement that locks them checks again.
    owed text := CASE p_slice
        WHEN 1 THEN 'o.state = ''pending'''
        WHEN 2 THEN 'o.state IN (''leased'', ''queued'', ''sending'') AND o.lease_until <= c.now'
        ELSE '(o.state = ''pending'' OR (o.state IN (''leased'', ''queued'', ''sending'') AND o.lease_until <= c.now))'
    END;
    pick text;
BEGIN
    IF p_part = 'row' THEN
        RETURN 'WITH ' || clock || '
UPDATE owed_notifications n' || lease_set || '
  FROM clock c
 WHERE n.id = $11::bigint
RETURNING n.id, n.tenant_id, CASE WHEN n.state = ''leased'' THEN n.due_at END, n.published_at IS NOT NULL,
          n.queue_generation, owed_sweep_account_of(n.channel, $5::text[], $6::integer[]), n.state, $12::bigint,
          $13::boolean, NULL::integer, NULL::integer, NULL::integer, NULL::boolean, c.now';
    END IF;

    pick := 'WITH RECURSIVE ' || clock || ',
acct AS MATERIALIZED (
    SELECT a, ($8::integer[])[a] AS cap FROM owed_sweep_open_accounts($7::text[]) a),
flight AS MATERIALIZED (
    SELECT f.tenant_id, f.account AS a, f.due_now, f.due_by_horizon
      FROM clock c, owed_sweep_in_flight(c.now, c.horizon, c.live_until, $5::text[], $6::integer[],
                                         (SELECT least(2 * coalesce(sum(cap), 0) + $4::integer, 2147483647)::integer
                                            FROM acct)) f),
room AS MATERIALIZED (
    SELECT acct.a, coalesce(sum(f.due_by_horizon), 0)::integer AS outstanding,
           floor(greatest(acct.cap - coalesce(sum(f.due_now), 0), 0) * $9::double precision)::integer AS quota_now,
           floor(greatest(acct.cap - coalesce(sum(f.due_by_horizon), 0), 0) * $9::double precision)::integer AS quota_all
      FROM acct LEFT JOIN flight f ON f.a = acct.a
     GROUP BY acct.a, acct.cap)';
    IF p_slice IN (0, 1) THEN
        pick := pick || ',
grp AS (
    (SELECT o.tenant_id, o.channel, greatest(o.due_at, o.created_at) AS first_owed
       FROM owed_notifications o
      WHERE o.state = ''pending''
      ORDER BY o.tenant_id, o.channel, greatest(o.due_at, o.created_at), o.due_at, o.id
      LIMIT 1)
    UNION ALL
    SELECT nx.tenant_id, nx.channel, nx.first_owed
      FROM grp g CROSS JOIN LATERAL (
        SELECT o.tenant_id, o.channel, greatest(o.due_at, o.created_at) AS first_owed
          FROM owed_notifications o
         WHERE o.state = ''pending'' AND (o.tenant_id, o.channel) > (g.tenant_id, g.channel)
         ORDER BY o.tenant_id, o.channel, greatest(o.due_at, o.created_at), o.due_at, o.id
         LIMIT 1) nx),
live AS MATERIALIZED (
    SELECT g.tenant_id, g.channel, owed_sweep_account_of(g.channel, $5::text[], $6::integer[]) AS a
      FROM grp g, clock c
     WHERE g.first_owed <= c.horizon
       AND NOT EXISTS (SELECT FROM owed_tenant_pauses tp WHERE tp.tenant_id = g.tenant_id)),
per AS MATERIALIZED (
    SELECT r.a, count(*) AS groups,
           least($4::integer, ceil(r.quota_now::numeric / count(*)))::integer AS per_group
      FROM live l JOIN room r ON r.a = l.a
     GROUP BY r.a, r.quota_now),
pend AS MATERIALIZED (
    SELECT l.tenant_id, l.a, x.id, x.owed_since, x.created_at, x.due_at,
           count(*) OVER (PARTITION BY l.tenant_id, l.channel) > per.per_group AS cut
      FROM live l JOIN per ON per.a = l.a AND per.per_group > 0
     CROSS JOIN clock c
     CROSS JOIN LATERAL (
        SELECT o.id, greatest(o.due_at, o.created_at) AS owed_since, o.created_at, o.due_at
          FROM owed_notifications o
         WHERE o.state = ''pending'' AND o.tenant_id = l.tenant_id AND o.channel = l.channel
           AND greatest(o.due_at, o.created_at) <= c.horizon
           AND (o.expires_at IS NULL OR o.expires_at > c.now)
         ORDER BY greatest(o.due_at, o.created_at), o.due_at, o.id
         LIMIT per.per_group + 1) x)';
    END IF;
    IF p_slice IN (0, 2) THEN
        pick := pick || ',
lapsed AS MATERIALIZED (
    SELECT x.tenant_id, x.a, x.id, x.owed_since, x.created_at, x.due_at
      FROM clock c CROSS JOIN LATERAL (
        SELECT o.tenant_id, owed_sweep_account_of(o.channel, $5::text[], $6::integer[]) AS a, o.id,
               greatest(o.due_at, o.created_at) AS owed_since, o.created_at, o.due_at
          FROM owed_notifications o
         WHERE o.state IN (''leased'', ''queued'', ''sending'') AND o.lease_until <= c.now
           AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)
           AND NOT EXISTS (SELECT FROM owed_tenant_pauses tp WHERE tp.tenant_id = o.tenant_id)
           AND owed_sweep_account_of(o.channel, $5::text[], $6::integer[]) IN (SELECT a FROM acct)
         ORDER BY o.lease_until
         LIMIT 4 * $4::integer) x)';
    END IF;
    pick := pick || ',
cand AS (' || CASE p_slice
        WHEN 1 THEN 'SELECT tenant_id, a, id, owed_since, created_at, due_at, false AS requeue FROM pend'
        WHEN 2 THEN 'SELECT tenant_id, a, id, owed_since, created_at, due_at, true AS requeue FROM lapsed'
        ELSE 'SELECT tenant_id, a, id, owed_since, created_at, due_at, false AS requeue FROM pend
          UNION ALL SELECT tenant_id, a, id, owed_since, created_at, due_at, true FROM lapsed' END || '),
ranked AS (
    SELECT x.*, x.owed_since <= k.now AS due,
           row_number() OVER (PARTITION BY x.tenant_id, x.a, x.owed_since <= k.now
                              ORDER BY x.owed_since, x.due_at, x.id)
           + CASE WHEN x.owed_since <= k.now THEN coalesce(f.due_now, 0) ELSE coalesce(f.due_by_horizon, 0) END
             AS place
      FROM cand x CROSS JOIN clock k
      LEFT JOIN flight f ON f.tenant_id = x.tenant_id AND f.a = x.a),
placed AS (
    SELECT r.*, row_number() OVER (PARTITION BY r.a, r.due
                                   ORDER BY r.place, r.owed_since, r.created_at, r.due_at, r.id) AS turn,
           count(*) FILTER (WHERE r.due) OVER (PARTITION BY r.a) AS due_rows
      FROM ranked r),
fits AS (
    SELECT p.*, (p.due AND p.turn <= q.quota_now)
                OR (NOT p.due AND p.turn <= q.quota_all - least(q.quota_now, p.due_rows)) AS fits
      FROM placed p JOIN room q ON q.a = p.a),
taken AS MATERIALIZED (
    SELECT id, a, requeue, row_number() OVER (ORDER BY NOT due, place, owed_since, created_at, due_at, id) AS ord
      FROM fits WHERE fits
     ORDER BY NOT due, place, owed_since, created_at, due_at, id
     LIMIT $4::integer),
took AS MATERIALIZED (
    SELECT array_agg(id) AS ids, jsonb_object_agg(id::text, jsonb_build_array(a, ord, requeue)) AS row
      FROM taken),
locked AS (
    SELECT o.id FROM owed_notifications o CROSS JOIN clock c
     WHERE o.id = ANY ((SELECT ids FROM took)::bigint[]) AND ' || owed || '
       AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)
       FOR UPDATE OF o SKIP LOCKED)
SELECT l.id, (t.row -> l.id::text ->> 0)::integer AS a, (t.row -> l.id::text ->> 1)::bigint AS ord,
       (t.row -> l.id::text ->> 2)::boolean AS requeue, NULL::integer AS outstanding, NULL::integer AS quota,
       NULL::integer AS held, NULL::boolean AS more
  FROM locked l CROSS JOIN took t
UNION ALL
SELECT NULL, q.a, NULL, NULL, q.outstanding, q.quota_now,
       (SELECT count(*) FROM fits WHERE fits.a = q.a AND NOT fits.fits)::integer'
       || CASE WHEN p_slice IN (0, 1) THEN '
       + CASE WHEN q.quota_now <= 0 THEN coalesce((SELECT groups FROM per WHERE per.a = q.a), 0)::integer ELSE 0 END,
       (SELECT count(*) FROM fits WHERE fits.a = q.a AND NOT fits.fits) = 0
         AND EXISTS (SELECT FROM pend WHERE pend.a = q.a AND pend.cut)' ELSE ', false' END || '
  FROM room q';
    IF p_part = 'pick' THEN
        RETURN pick;
    END IF;
    -- The picked rows reach the ledger as an array of ids (an index scan
    -- of its key), and their account, place and kind come back by id from
    -- a jsonb object, as they go from taken to locked above: a join of two
    -- CTEs is planned on guesses of their sizes, and a nested loop over
    -- hundreds of rows costs their square.
    RETURN 'WITH picked AS MATERIALIZED (' || pick || '),
' || clock || ',
slice AS MATERIALIZED (
    SELECT array_agg(id) AS ids, jsonb_object_agg(id::text, jsonb_build_array(a, ord, requeue)) AS row
      FROM picked WHERE id IS NOT NULL),
leased AS (
    UPDATE owed_notifications n' || lease_set || '
      FROM clock c, slice s
     WHERE n.id = ANY (s.ids)
    RETURNING n.id, n.tenant_id, CASE WHEN n.state = ''leased'' THEN n.due_at END AS due_at,
              n.published_at IS NOT NULL AS republish, n.queue_generation, (s.row -> n.id::text ->> 0)::integer AS a,
              n.state, (s.row -> n.id::text ->> 1)::bigint AS ord, (s.row -> n.id::text ->> 2)::boolean AS requeue)
SELECT l.id, l.tenant_id, l.due_at, l.republish, l.queue_generation, l.a, l.state, l.ord, l.requeue,
       NULL::integer, NULL::integer, NULL::integer, NULL::boolean, (SELECT now FROM clock)
  FROM leased l
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, p.a, NULL, NULL, NULL, p.outstanding, p.quota, p.held, p.more,
       (SELECT now FROM clock)
  FROM picked p WHERE p.id IS NULL
 ORDER BY 8, 6';
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_lease_fair(p_slice integer, p_now timestamptz, p_for double precision,
                                      p_ahead double precision, p_limit integer, p_channels text[],
                                      p_accounts integer[], p_names text[], p_caps integer[],
                                      p_share double precision, p_live_for double precision)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, republish boolean, queue_generation integer,
               account integer, state text, ord bigint, requeue boolean, outstanding integer, room integer,
               held integer, more boolean, asked_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    r record;
    err text;
BEGIN
    -- Nothing to lease (the sweep's most frequent answer): a static
    -- statement, planned once per session, answers it without planning
    -- the slice's. The slice reads no more than this, so it would find
    -- nothing either; no account's rows are counted.
    IF NOT EXISTS (SELECT FROM owed_notifications o
                    WHERE o.settled_at IS NULL
                      AND o.due_at <= coalesce(p_now, now()) + make_interval(secs => p_ahead)
                      AND ((p_slice IN (0, 1) AND o.state = 'pending')
                           OR (p_slice IN (0, 2) AND o.state <> 'pending' AND o.lease_until <= coalesce(p_now, now())))) THEN
        RETURN;
    END IF;
    BEGIN
        RETURN QUERY EXECUTE owed_sweep_fair_lease_sql(p_slice, 'lease')
            USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share, p_live_for;
        RETURN;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
        RAISE WARNING 'owed_sweep_lease_fair: a row failed the slice (%); leasing its rows one at a time', err;
    END;
    FOR r IN EXECUTE owed_sweep_fair_lease_sql(p_slice, 'pick')
        USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share, p_live_for
    LOOP
        IF r.id IS NULL THEN
            RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::timestamptz, NULL::boolean, NULL::integer, r.a,
                                NULL::text, NULL::bigint, NULL::boolean, r.outstanding, r.quota, r.held, r.more,
                                coalesce(p_now, now());
            CONTINUE;
        END IF;
        BEGIN
            RETURN QUERY EXECUTE owed_sweep_fair_lease_sql(p_slice, 'row')
                USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share,
                      p_live_for, r.id, r.ord, r.requeue;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
            IF owed_sweep_settle_failed(r.id, p_now, 'set aside by the sweep: ' || err) THEN
                RETURN QUERY SELECT r.id, NULL::text, NULL::timestamptz, NULL::boolean, NULL::integer, r.a,
                                    'failed'::text, r.ord, r.requeue, NULL::integer, NULL::integer, NULL::integer,
                                    NULL::boolean, coalesce(p_now, now());
            END IF;
        END;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_explain_lease_fair(p_slice integer, p_now timestamptz, p_for double precision,
                                              p_ahead double precision, p_limit integer, p_channels text[],
                                              p_accounts integer[], p_names text[], p_caps integer[],
                                              p_share double precision, p_live_for double precision)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    doc json;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || owed_sweep_fair_lease_sql(p_slice, 'lease')
        INTO doc USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share, p_live_for;
    RETURN doc;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_survey_fair(p_now timestamptz, p_ahead double precision, p_live_for double precision,
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
       EXISTS (SELECT FROM owed_notifications o
                WHERE o.settled_at IS NULL AND o.due_at <= c.horizon AND o.state = 'pending'
                  AND (o.expires_at IS NULL OR o.expires_at > c.now)),
       EXISTS (SELECT FROM owed_notifications o
                WHERE o.state IN ('leased', 'queued', 'sending') AND o.lease_until <= c.now
                  AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)),
       (SELECT extract(epoch FROM c.now - o.due_at)::double precision FROM owed_notifications o
         WHERE o.settled_at IS NULL AND o.due_at > '-infinity' AND o.due_at <= c.now
         ORDER BY o.due_at LIMIT 1),
       c.now
  FROM clock c
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_leasable_fair(p_now timestamptz, p_ahead double precision, p_channels text[],
                                         p_accounts integer[], p_names text[])
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH clock AS (
    SELECT coalesce($1, now()) AS now, coalesce($1, now()) + make_interval(secs => $2) AS horizon
)
SELECT EXISTS (SELECT 1 FROM owed_notifications o
                WHERE o.settled_at IS NULL AND o.due_at <= c.horizon
                  AND (o.expires_at IS NULL OR o.expires_at > c.now)
                  AND ((o.state = 'pending' AND greatest(o.due_at, o.created_at) <= c.horizon)
                       OR (o.state <> 'pending' AND o.lease_until <= c.now))
                  AND NOT EXISTS (SELECT FROM owed_tenant_pauses tp WHERE tp.tenant_id = o.tenant_id)
                  AND owed_sweep_account_of(o.channel, $3, $4) IN (SELECT owed_sweep_open_accounts($5)))
  FROM clock c
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_sweep_send_rates(p_now timestamptz, p_window double precision, p_count_up_to integer)
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

CALL owed_definer_takes_functions(ARRAY['owed_sweep_lease_fair', 'owed_sweep_explain_lease_fair',
                                             'owed_sweep_survey_fair', 'owed_sweep_leasable_fair',
                                             'owed_sweep_send_rates']);

GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_expire(p_now timestamptz, p_limit integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    n bigint := 0;
    r bigint;
    err text;
BEGIN
    BEGIN
        RETURN owed_sweep_expire_rows(ARRAY(SELECT owed_sweep_overdue(p_now, p_limit)), p_now);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
        RAISE WARNING 'owed_sweep_expire: a row failed the expiry (%); expiring one row at a time', err;
    END;
    FOR r IN SELECT owed_sweep_overdue(p_now, p_limit) LOOP
        BEGIN
            n := n + owed_sweep_expire_rows(ARRAY[r], p_now);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
            PERFORM owed_sweep_settle_failed(r, p_now, 'set aside by the sweep, past its expiry: ' || err);
        END;
    END LOOP;
    RETURN n;
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down

GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_expire(p_now timestamptz, p_limit integer) RETURNS bigint
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
REVOKE owed_definer FROM CURRENT_USER;

DROP FUNCTION owed_sweep_expire_rows(bigint[], timestamptz);

DROP FUNCTION owed_sweep_overdue(timestamptz, integer);

DROP FUNCTION owed_sweep_settle_failed(bigint, timestamptz, text);

DROP FUNCTION owed_sweep_in_flight(timestamptz, timestamptz, timestamptz, text[], integer[], integer);

DROP FUNCTION owed_sweep_open_accounts(text[]);

DROP FUNCTION owed_sweep_account_of(text, text[], integer[]);

DROP FUNCTION owed_sweep_send_rates(timestamptz, double precision, integer);

DROP FUNCTION owed_sweep_leasable_fair(timestamptz, double precision, text[], integer[], text[]);

DROP FUNCTION owed_sweep_survey_fair(timestamptz, double precision, double precision, text[], integer[], text[], integer);

DROP FUNCTION owed_sweep_explain_lease_fair(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision);

DROP FUNCTION owed_sweep_lease_fair(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision);

DROP FUNCTION owed_sweep_fair_lease_sql(integer, text);
