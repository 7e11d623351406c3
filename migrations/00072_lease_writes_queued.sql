-- The sweep's lease writes a pending row straight to what the queued mark
-- wrote after the publish (queued, published now, its lease ending the
-- requeue-after past the later of now and its due time): one row write,
-- one non-HOT update and the mark's statement fewer per delivery. A new
-- lease function takes the requeue-after (owed_sweep_lease_fair_queued);
-- the previous release's (owed_sweep_lease_fair_not_before) leases every
-- row as before, since its sweeper marks them all. The sweep's release
-- and set-aside, and the wake-up trigger's exception for a release, take
-- a row the lease wrote queued and nothing wrote since (owed_unpublished)
-- as they take a leased one.
--
-- Expand-only: new functions, new bodies of the same functions with the
-- same columns, owner and grants, and the same trigger with a wider
-- exception. Replacing a function owed_definer owns takes membership of
-- it, for the migration alone.

-- +goose Up
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE FUNCTION owed_unpublished(p_state text, p_published_at timestamptz, p_updated_at timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT p_state = 'leased' OR (p_state = 'queued' AND p_published_at IS NOT DISTINCT FROM p_updated_at)
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_release(p_ids bigint[], p_now timestamptz) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH released AS (
    UPDATE owed_notifications n
       SET state = 'pending', lease_until = NULL, updated_at = coalesce($2, now()),
           published_at = CASE WHEN n.state = 'queued' THEN NULL ELSE n.published_at END
      FROM (SELECT id FROM owed_notifications
             WHERE id = ANY($1) AND owed_unpublished(state, published_at, updated_at) ORDER BY id FOR UPDATE) l
     WHERE n.id = l.id AND owed_unpublished(n.state, n.published_at, n.updated_at)
    RETURNING 1
)
SELECT count(*) FROM released
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_set_aside(p_id bigint, p_now timestamptz, p_reason text) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH failed AS (
    UPDATE owed_notifications
       SET state = 'failed', settled_at = coalesce($2, now()), lease_until = NULL,
           last_error = $3, updated_at = coalesce($2, now())
     WHERE id = $1 AND owed_unpublished(state, published_at, updated_at)
    RETURNING 1
)
SELECT count(*) FROM failed
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_fair_lease_sql(p_slice integer, p_part text, p_not_before boolean) RETURNS text
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
    -- failed when no message can carry its due time. With $15, the
    -- requeue-after in seconds, a pending row is written straight to what
    -- the queued mark (owed_sweep_mark_queued) would write once its
    -- message is accepted: queued, published now, its lease ending $15
    -- after the later of now and its due time. That is one row write
    -- fewer per delivery; a publish the queue refuses hands the row back
    -- (owed_sweep_release), and a sweep that dies before its publish
    -- leaves the row to the lapsed-lease requeue $15 after its due time
    -- (docs/reliability.md). A row whose lease ran out is leased, and
    -- marked after its publish, as before: its intents (intents.sql) tell
    -- the sweep's lease from a worker's hand-back by the state leased.
    -- Without $15 (the previous release's lease) every row is leased.
    -- Each part then sets not_before to the row's as the slice took it (a
    -- hand-back's, NULL for any other row), so a lease never carries an
    -- earlier wait's.
    fresh constant text := '(n.state = ''pending'' AND $15::double precision IS NOT NULL)';
    lease_set constant text := '
   SET state = CASE WHEN NOT ' || ok || ' THEN ''failed'' WHEN ' || fresh || ' THEN ''queued'' ELSE ''leased'' END,
       lease_until = CASE WHEN NOT ' || ok || ' THEN NULL
                          WHEN ' || fresh || ' THEN greatest(c.now, n.due_at) + make_interval(secs => $15::double precision)
                          ELSE c.now + make_interval(secs => $2::double precision) END,
       published_at = CASE WHEN ' || ok || ' AND ' || fresh || ' THEN c.now ELSE n.published_at END,
       settled_at = CASE WHEN ' || ok || ' THEN NULL ELSE c.now END,
       last_error = CASE WHEN ' || ok || ' THEN n.last_error
                         ELSE ''set aside by the sweep: due_at '' || n.due_at::text
                              || '' is outside 0001-01-01 to 9999-12-31 UTC, so no message can carry it'' END,
       queue_generation = n.queue_generation
                          + CASE WHEN ' || ok || ' AND n.published_at IS NOT NULL THEN 1 ELSE 0 END,
       updated_at = c.now';
    -- A lease that ran out, or (p_not_before) a row handed back to the
    -- ledger whose not-before falls by the horizon: no message of it is
    -- anywhere.
    lapsed_lease constant text := CASE WHEN p_not_before
        THEN 'o.lease_until <= c.horizon
           AND (o.lease_until <= c.now OR owed_handed_back(o.state, o.lease_until, o.not_before))'
        ELSE 'o.lease_until <= c.now' END;
    -- The rows of the slice, as the statement that locks them checks again.
    owed text := CASE p_slice
        WHEN 1 THEN 'o.state = ''pending'''
        WHEN 2 THEN 'o.state IN (''leased'', ''queued'', ''sending'') AND ' || lapsed_lease
        ELSE '(o.state = ''pending'' OR (o.state IN (''leased'', ''queued'', ''sending'') AND ' || lapsed_lease || '))'
    END;
    pick text;
BEGIN
    IF p_part = 'row' THEN
        RETURN 'WITH ' || clock || '
UPDATE owed_notifications n' || lease_set || ',
       not_before = $14::timestamptz
  FROM clock c
 WHERE n.id = $11::bigint
RETURNING n.id, n.tenant_id, CASE WHEN n.state IN (''leased'', ''queued'') THEN n.due_at END,
          n.state = ''leased'' AND n.published_at IS NOT NULL,
          n.queue_generation, owed_sweep_account_of(n.channel, $5::text[], $6::integer[]), n.state, $12::bigint,
          $13::boolean, NULL::integer, NULL::integer, NULL::integer, NULL::boolean, c.now, n.not_before';
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
    SELECT x.tenant_id, x.a, x.id, x.owed_since, x.created_at, x.due_at, x.not_before
      FROM clock c CROSS JOIN LATERAL (
        SELECT o.tenant_id, owed_sweep_account_of(o.channel, $5::text[], $6::integer[]) AS a, o.id,
               greatest(o.due_at, o.created_at) AS owed_since, o.created_at, o.due_at,
               ' || CASE WHEN p_not_before THEN 'CASE WHEN owed_handed_back(o.state, o.lease_until, o.not_before)
                                                 THEN o.not_before END'
                         ELSE 'NULL::timestamptz' END || ' AS not_before
          FROM owed_notifications o
         WHERE o.state IN (''leased'', ''queued'', ''sending'') AND ' || lapsed_lease || '
           AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)
           AND NOT EXISTS (SELECT FROM owed_tenant_pauses tp WHERE tp.tenant_id = o.tenant_id)
           AND owed_sweep_account_of(o.channel, $5::text[], $6::integer[]) IN (SELECT a FROM acct)
         ORDER BY o.lease_until
         LIMIT 4 * $4::integer) x)';
    END IF;
    pick := pick || ',
cand AS (' || CASE p_slice
        WHEN 1 THEN 'SELECT tenant_id, a, id, owed_since, created_at, due_at, false AS requeue,
                            NULL::timestamptz AS not_before FROM pend'
        WHEN 2 THEN 'SELECT tenant_id, a, id, owed_since, created_at, due_at, true AS requeue, not_before FROM lapsed'
        ELSE 'SELECT tenant_id, a, id, owed_since, created_at, due_at, false AS requeue,
                     NULL::timestamptz AS not_before FROM pend
          UNION ALL SELECT tenant_id, a, id, owed_since, created_at, due_at, true, not_before FROM lapsed' END || '),
ranked AS (
    SELECT x.*, greatest(x.owed_since, x.not_before) <= k.now AS due,
           row_number() OVER (PARTITION BY x.tenant_id, x.a, greatest(x.owed_since, x.not_before) <= k.now
                              ORDER BY x.owed_since, x.due_at, x.id)
           + CASE WHEN greatest(x.owed_since, x.not_before) <= k.now THEN coalesce(f.due_now, 0)
                  ELSE coalesce(f.due_by_horizon, 0) END
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
    SELECT id, a, requeue, not_before, row_number() OVER (ORDER BY NOT due, place, owed_since, created_at, due_at, id) AS ord
      FROM fits WHERE fits
     ORDER BY NOT due, place, owed_since, created_at, due_at, id
     LIMIT $4::integer),
took AS MATERIALIZED (
    SELECT array_agg(id) AS ids, jsonb_object_agg(id::text, jsonb_build_array(a, ord, requeue, not_before)) AS row
      FROM taken),
locked AS (
    SELECT o.id FROM owed_notifications o CROSS JOIN clock c
     WHERE o.id = ANY ((SELECT ids FROM took)::bigint[]) AND ' || owed || '
       AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)
       FOR UPDATE OF o SKIP LOCKED)
SELECT l.id, (t.row -> l.id::text ->> 0)::integer AS a, (t.row -> l.id::text ->> 1)::bigint AS ord,
       (t.row -> l.id::text ->> 2)::boolean AS requeue, NULL::integer AS outstanding, NULL::integer AS quota,
       NULL::integer AS held, NULL::boolean AS more, (t.row -> l.id::text ->> 3)::timestamptz AS not_before
  FROM locked l CROSS JOIN took t
UNION ALL
SELECT NULL, q.a, NULL, NULL, q.outstanding, q.quota_now,
       (SELECT count(*) FROM fits WHERE fits.a = q.a AND NOT fits.fits)::integer'
       || CASE WHEN p_slice IN (0, 1) THEN '
       + CASE WHEN q.quota_now <= 0 THEN coalesce((SELECT groups FROM per WHERE per.a = q.a), 0)::integer ELSE 0 END,
       (SELECT count(*) FROM fits WHERE fits.a = q.a AND NOT fits.fits) = 0
         AND EXISTS (SELECT FROM pend WHERE pend.a = q.a AND pend.cut)' ELSE ', false' END || ',
       NULL::timestamptz
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
    SELECT array_agg(id) AS ids, jsonb_object_agg(id::text, jsonb_build_array(a, ord, requeue, not_before)) AS row
      FROM picked WHERE id IS NOT NULL),
leased AS (
    UPDATE owed_notifications n' || lease_set || ',
           not_before = (s.row -> n.id::text ->> 3)::timestamptz
      FROM clock c, slice s
     WHERE n.id = ANY (s.ids)
    RETURNING n.id, n.tenant_id, CASE WHEN n.state IN (''leased'', ''queued'') THEN n.due_at END AS due_at,
              n.state = ''leased'' AND n.published_at IS NOT NULL AS republish, n.queue_generation, (s.row -> n.id::text ->> 0)::integer AS a,
              n.state, (s.row -> n.id::text ->> 1)::bigint AS ord, (s.row -> n.id::text ->> 2)::boolean AS requeue,
              n.not_before)
SELECT l.id, l.tenant_id, l.due_at, l.republish, l.queue_generation, l.a, l.state, l.ord, l.requeue,
       NULL::integer, NULL::integer, NULL::integer, NULL::boolean, (SELECT now FROM clock), l.not_before
  FROM leased l
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, p.a, NULL, NULL, NULL, p.outstanding, p.quota, p.held, p.more,
       (SELECT now FROM clock), NULL::timestamptz
  FROM picked p WHERE p.id IS NULL
 ORDER BY 8, 6';
END
$fn$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION owed_sweep_lease_fair_queued(p_slice integer, p_now timestamptz, p_for double precision,
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
CALL owed_definer_takes_functions(ARRAY['owed_sweep_lease_fair_queued']);
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_lease_fair_not_before(p_slice integer, p_now timestamptz, p_for double precision,
                                                 p_ahead double precision, p_limit integer, p_channels text[],
                                                 p_accounts integer[], p_names text[], p_caps integer[],
                                                 p_share double precision, p_live_for double precision,
                                                 p_not_before boolean)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, republish boolean, queue_generation integer,
               account integer, state text, ord bigint, requeue boolean, outstanding integer, room integer,
               held integer, more boolean, asked_at timestamptz, not_before timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT * FROM owed_sweep_lease_fair_queued(p_slice, p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names,
                                           p_caps, p_share, p_live_for, p_not_before, NULL)
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_explain_lease_fair(p_slice integer, p_now timestamptz, p_for double precision,
                                              p_ahead double precision, p_limit integer, p_channels text[],
                                              p_accounts integer[], p_names text[], p_caps integer[],
                                              p_share double precision, p_live_for double precision)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    doc json;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || owed_sweep_fair_lease_sql(p_slice, 'lease', true)
        INTO doc USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share, p_live_for,
                       NULL::bigint, NULL::bigint, NULL::boolean, NULL::timestamptz, NULL::double precision;
    RETURN doc;
END
$$;
-- +goose StatementEnd
-- The trigger's swap takes owed_notifications' exclusive lock, and each of
-- its month partitions' after it. A serving transaction locks a partition
-- when a statement first touches it, so it can hold one the swap still
-- needs while it waits for the parent the swap holds: a deadlock, seen in
-- TestUpgradeAndRollback under load. The lock is taken first, whole or
-- not at all, as the partition migration takes its own: a wait is cut at
-- half a second and a deadlock given up, and either tried again.
-- +goose StatementBegin
DO $lock$
DECLARE
    v_timeout text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', '500ms', true);
    FOR v_try IN 1 .. 200 LOOP
        BEGIN
            LOCK TABLE owed_notifications IN ACCESS EXCLUSIVE MODE;
            EXIT;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            IF v_try = 200 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.05);
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', v_timeout, true);
END
$lock$;
-- +goose StatementEnd
DROP TRIGGER owed_notifications_due_updated ON owed_notifications;
CREATE TRIGGER owed_notifications_due_updated
    AFTER UPDATE OF state, due_at, not_before ON owed_notifications
    FOR EACH ROW
    WHEN ((NEW.state = 'pending' AND NEW.due_at <= now() + interval '1 minute'
           AND (OLD.due_at IS DISTINCT FROM NEW.due_at
                OR (OLD.state <> 'pending' AND NOT owed_unpublished(OLD.state, OLD.published_at, OLD.updated_at))))
          OR (OLD.state = 'sending' AND owed_handed_back(NEW.state, NEW.lease_until, NEW.not_before)
              AND NEW.not_before <= now() + interval '1 minute'))
    EXECUTE FUNCTION owed_notify_due_updated();
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- The trigger's swap takes the lock whole first, as in the Up.
-- +goose StatementBegin
DO $lock$
DECLARE
    v_timeout text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', '500ms', true);
    FOR v_try IN 1 .. 200 LOOP
        BEGIN
            LOCK TABLE owed_notifications IN ACCESS EXCLUSIVE MODE;
            EXIT;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            IF v_try = 200 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.05);
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', v_timeout, true);
END
$lock$;
-- +goose StatementEnd
DROP TRIGGER owed_notifications_due_updated ON owed_notifications;
CREATE TRIGGER owed_notifications_due_updated
    AFTER UPDATE OF state, due_at, not_before ON owed_notifications
    FOR EACH ROW
    WHEN ((NEW.state = 'pending' AND NEW.due_at <= now() + interval '1 minute'
           AND (OLD.due_at IS DISTINCT FROM NEW.due_at OR OLD.state NOT IN ('pending', 'leased')))
          OR (OLD.state = 'sending' AND owed_handed_back(NEW.state, NEW.lease_until, NEW.not_before)
              AND NEW.not_before <= now() + interval '1 minute'))
    EXECUTE FUNCTION owed_notify_due_updated();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_explain_lease_fair(p_slice integer, p_now timestamptz, p_for double precision,
                                              p_ahead double precision, p_limit integer, p_channels text[],
                                              p_accounts integer[], p_names text[], p_caps integer[],
                                              p_share double precision, p_live_for double precision)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    doc json;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || owed_sweep_fair_lease_sql(p_slice, 'lease', true)
        INTO doc USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share, p_live_for;
    RETURN doc;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_lease_fair_not_before(p_slice integer, p_now timestamptz, p_for double precision,
                                                 p_ahead double precision, p_limit integer, p_channels text[],
                                                 p_accounts integer[], p_names text[], p_caps integer[],
                                                 p_share double precision, p_live_for double precision,
                                                 p_not_before boolean)
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
            USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share, p_live_for;
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
                      p_live_for, r.id, r.ord, r.requeue, r.not_before;
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
CREATE OR REPLACE FUNCTION owed_sweep_fair_lease_sql(p_slice integer, p_part text, p_not_before boolean) RETURNS text
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
    -- failed when no message can carry its due time. Each part then sets
    -- not_before to the row's as the slice took it (a hand-back's, NULL for
    -- any other row), so a lease never carries an earlier wait's.
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
    -- A lease that ran out, or (p_not_before) a row handed back to the
    -- ledger whose not-before falls by the horizon: no message of it is
    -- anywhere.
    lapsed_lease constant text := CASE WHEN p_not_before
        THEN 'o.lease_until <= c.horizon
           AND (o.lease_until <= c.now OR owed_handed_back(o.state, o.lease_until, o.not_before))'
        ELSE 'o.lease_until <= c.now' END;
    -- The rows of the slice, as the statement that locks them checks again.
    owed text := CASE p_slice
        WHEN 1 THEN 'o.state = ''pending'''
        WHEN 2 THEN 'o.state IN (''leased'', ''queued'', ''sending'') AND ' || lapsed_lease
        ELSE '(o.state = ''pending'' OR (o.state IN (''leased'', ''queued'', ''sending'') AND ' || lapsed_lease || '))'
    END;
    pick text;
BEGIN
    IF p_part = 'row' THEN
        RETURN 'WITH ' || clock || '
UPDATE owed_notifications n' || lease_set || ',
       not_before = $14::timestamptz
  FROM clock c
 WHERE n.id = $11::bigint
RETURNING n.id, n.tenant_id, CASE WHEN n.state = ''leased'' THEN n.due_at END, n.published_at IS NOT NULL,
          n.queue_generation, owed_sweep_account_of(n.channel, $5::text[], $6::integer[]), n.state, $12::bigint,
          $13::boolean, NULL::integer, NULL::integer, NULL::integer, NULL::boolean, c.now, n.not_before';
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
    SELECT x.tenant_id, x.a, x.id, x.owed_since, x.created_at, x.due_at, x.not_before
      FROM clock c CROSS JOIN LATERAL (
        SELECT o.tenant_id, owed_sweep_account_of(o.channel, $5::text[], $6::integer[]) AS a, o.id,
               greatest(o.due_at, o.created_at) AS owed_since, o.created_at, o.due_at,
               ' || CASE WHEN p_not_before THEN 'CASE WHEN owed_handed_back(o.state, o.lease_until, o.not_before)
                                                 THEN o.not_before END'
                         ELSE 'NULL::timestamptz' END || ' AS not_before
          FROM owed_notifications o
         WHERE o.state IN (''leased'', ''queued'', ''sending'') AND ' || lapsed_lease || '
           AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)
           AND NOT EXISTS (SELECT FROM owed_tenant_pauses tp WHERE tp.tenant_id = o.tenant_id)
           AND owed_sweep_account_of(o.channel, $5::text[], $6::integer[]) IN (SELECT a FROM acct)
         ORDER BY o.lease_until
         LIMIT 4 * $4::integer) x)';
    END IF;
    pick := pick || ',
cand AS (' || CASE p_slice
        WHEN 1 THEN 'SELECT tenant_id, a, id, owed_since, created_at, due_at, false AS requeue,
                            NULL::timestamptz AS not_before FROM pend'
        WHEN 2 THEN 'SELECT tenant_id, a, id, owed_since, created_at, due_at, true AS requeue, not_before FROM lapsed'
        ELSE 'SELECT tenant_id, a, id, owed_since, created_at, due_at, false AS requeue,
                     NULL::timestamptz AS not_before FROM pend
          UNION ALL SELECT tenant_id, a, id, owed_since, created_at, due_at, true, not_before FROM lapsed' END || '),
ranked AS (
    SELECT x.*, greatest(x.owed_since, x.not_before) <= k.now AS due,
           row_number() OVER (PARTITION BY x.tenant_id, x.a, greatest(x.owed_since, x.not_before) <= k.now
                              ORDER BY x.owed_since, x.due_at, x.id)
           + CASE WHEN greatest(x.owed_since, x.not_before) <= k.now THEN coalesce(f.due_now, 0)
                  ELSE coalesce(f.due_by_horizon, 0) END
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
    SELECT id, a, requeue, not_before, row_number() OVER (ORDER BY NOT due, place, owed_since, created_at, due_at, id) AS ord
      FROM fits WHERE fits
     ORDER BY NOT due, place, owed_since, created_at, due_at, id
     LIMIT $4::integer),
took AS MATERIALIZED (
    SELECT array_agg(id) AS ids, jsonb_object_agg(id::text, jsonb_build_array(a, ord, requeue, not_before)) AS row
      FROM taken),
locked AS (
    SELECT o.id FROM owed_notifications o CROSS JOIN clock c
     WHERE o.id = ANY ((SELECT ids FROM took)::bigint[]) AND ' || owed || '
       AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)
       FOR UPDATE OF o SKIP LOCKED)
SELECT l.id, (t.row -> l.id::text ->> 0)::integer AS a, (t.row -> l.id::text ->> 1)::bigint AS ord,
       (t.row -> l.id::text ->> 2)::boolean AS requeue, NULL::integer AS outstanding, NULL::integer AS quota,
       NULL::integer AS held, NULL::boolean AS more, (t.row -> l.id::text ->> 3)::timestamptz AS not_before
  FROM locked l CROSS JOIN took t
UNION ALL
SELECT NULL, q.a, NULL, NULL, q.outstanding, q.quota_now,
       (SELECT count(*) FROM fits WHERE fits.a = q.a AND NOT fits.fits)::integer'
       || CASE WHEN p_slice IN (0, 1) THEN '
       + CASE WHEN q.quota_now <= 0 THEN coalesce((SELECT groups FROM per WHERE per.a = q.a), 0)::integer ELSE 0 END,
       (SELECT count(*) FROM fits WHERE fits.a = q.a AND NOT fits.fits) = 0
         AND EXISTS (SELECT FROM pend WHERE pend.a = q.a AND pend.cut)' ELSE ', false' END || ',
       NULL::timestamptz
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
    SELECT array_agg(id) AS ids, jsonb_object_agg(id::text, jsonb_build_array(a, ord, requeue, not_before)) AS row
      FROM picked WHERE id IS NOT NULL),
leased AS (
    UPDATE owed_notifications n' || lease_set || ',
           not_before = (s.row -> n.id::text ->> 3)::timestamptz
      FROM clock c, slice s
     WHERE n.id = ANY (s.ids)
    RETURNING n.id, n.tenant_id, CASE WHEN n.state = ''leased'' THEN n.due_at END AS due_at,
              n.published_at IS NOT NULL AS republish, n.queue_generation, (s.row -> n.id::text ->> 0)::integer AS a,
              n.state, (s.row -> n.id::text ->> 1)::bigint AS ord, (s.row -> n.id::text ->> 2)::boolean AS requeue,
              n.not_before)
SELECT l.id, l.tenant_id, l.due_at, l.republish, l.queue_generation, l.a, l.state, l.ord, l.requeue,
       NULL::integer, NULL::integer, NULL::integer, NULL::boolean, (SELECT now FROM clock), l.not_before
  FROM leased l
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, p.a, NULL, NULL, NULL, p.outstanding, p.quota, p.held, p.more,
       (SELECT now FROM clock), NULL::timestamptz
  FROM picked p WHERE p.id IS NULL
 ORDER BY 8, 6';
END
$fn$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_set_aside(p_id bigint, p_now timestamptz, p_reason text) RETURNS bigint
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
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_release(p_ids bigint[], p_now timestamptz) RETURNS bigint
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
-- +goose StatementEnd
DROP FUNCTION owed_sweep_lease_fair_queued(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision, boolean, double precision);
DROP FUNCTION owed_unpublished(text, timestamptz, timestamptz);
REVOKE owed_definer FROM CURRENT_USER;
