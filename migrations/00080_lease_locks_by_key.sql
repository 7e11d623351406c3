-- The fair lease locks the rows it took by probing the key with each id,
-- in a lateral sub-select that locks (so the planner keeps the array's
-- elements outside the loop), not with o.id = ANY (the array), which the
-- planner could serve from the pending rows' index, testing every pending
-- row against the array (owed_sweep_fair_lease_sql,
-- internal/ledger/sql/sweep.sql).
-- +goose Up
GRANT owed_definer TO CURRENT_USER;
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
      FROM clock c,
           (SELECT least(2 * coalesce(sum(cap), 0) + $4::integer, 2147483647)::integer AS n FROM acct) lim,
           owed_sweep_in_flight(c.now, c.horizon, c.live_until, $5::text[], $6::integer[], lim.n) f),
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
cnt AS MATERIALIZED (
    SELECT l.tenant_id, l.channel, l.a, x.due, x.total, x.total > per.per_group AS cut
      FROM live l JOIN per ON per.a = l.a AND per.per_group > 0
     CROSS JOIN clock c
     CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE y.owed_since <= c.now)::integer AS due, count(*)::integer AS total
          FROM (SELECT greatest(o.due_at, o.created_at) AS owed_since
                  FROM owed_notifications o
                 WHERE o.state = ''pending'' AND o.tenant_id = l.tenant_id AND o.channel = l.channel
                   AND greatest(o.due_at, o.created_at) <= c.horizon
                   AND (o.expires_at IS NULL OR o.expires_at > c.now)
                 ORDER BY greatest(o.due_at, o.created_at), o.due_at, o.id
                 LIMIT per.per_group + 1) y) x),
lists AS MATERIALIZED (
    SELECT k.tenant_id, k.a, sum(k.due)::integer AS due, coalesce(max(f.due_now), 0)::integer AS held
      FROM cnt k LEFT JOIN flight f ON f.tenant_id = k.tenant_id AND f.a = k.a
     GROUP BY k.tenant_id, k.a),
level AS MATERIALIZED (
    SELECT (array_agg(q.p ORDER BY q.p))[$4::integer] AS p
      FROM (SELECT ls.a, ls.held + s.k AS p,
                   row_number() OVER (PARTITION BY ls.a ORDER BY ls.held + s.k) AS turn
              FROM lists ls CROSS JOIN LATERAL generate_series(1, ls.due) s(k)) q
      JOIN room r ON r.a = q.a
     WHERE q.turn <= r.quota_now),
pend AS MATERIALIZED (
    SELECT k.tenant_id, k.a, x.id, x.owed_since, x.created_at, x.due_at
      FROM cnt k JOIN lists ls ON ls.tenant_id = k.tenant_id AND ls.a = k.a
     CROSS JOIN level lv
     CROSS JOIN clock c
     CROSS JOIN LATERAL (
        SELECT o.id, greatest(o.due_at, o.created_at) AS owed_since, o.created_at, o.due_at
          FROM owed_notifications o
         WHERE o.state = ''pending'' AND o.tenant_id = k.tenant_id AND o.channel = k.channel
           AND greatest(o.due_at, o.created_at) <= c.horizon
           AND (o.expires_at IS NULL OR o.expires_at > c.now)
         ORDER BY greatest(o.due_at, o.created_at), o.due_at, o.id
         LIMIT CASE WHEN lv.p IS NULL THEN k.total ELSE least(k.total, greatest(lv.p - ls.held, 0)) END) x)';
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
    IF p_slice IN (0, 1) THEN
        pick := pick || ',
heldback AS MATERIALIZED (
    SELECT q.a, (greatest(0, d.due - q.quota_now)
                 + greatest(0, d.ahead - greatest(0, q.quota_all - least(q.quota_now, d.due))))::integer AS held
      FROM room q CROSS JOIN clock c CROSS JOIN LATERAL (
        SELECT coalesce((SELECT sum(k.due) FROM cnt k WHERE k.a = q.a), 0)' || CASE WHEN p_slice = 0 THEN '
               + (SELECT count(*) FROM lapsed x WHERE x.a = q.a AND greatest(x.owed_since, x.not_before) <= c.now)'
               ELSE '' END || ' AS due,
               coalesce((SELECT sum(k.total - k.due) FROM cnt k WHERE k.a = q.a), 0)' || CASE WHEN p_slice = 0 THEN '
               + (SELECT count(*) FROM lapsed x WHERE x.a = q.a AND NOT greatest(x.owed_since, x.not_before) <= c.now)'
               ELSE '' END || ' AS ahead) d)';
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
    SELECT x.id FROM unnest((SELECT ids FROM took)::bigint[]) AS t(id)
     CROSS JOIN clock c
     CROSS JOIN LATERAL (
        SELECT o.id FROM owed_notifications o
         WHERE o.id = t.id AND ' || owed || '
           AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)
           FOR UPDATE OF o SKIP LOCKED) x)
SELECT l.id, (t.row -> l.id::text ->> 0)::integer AS a, (t.row -> l.id::text ->> 1)::bigint AS ord,
       (t.row -> l.id::text ->> 2)::boolean AS requeue, NULL::integer AS outstanding, NULL::integer AS quota,
       NULL::integer AS held, NULL::boolean AS more, (t.row -> l.id::text ->> 3)::timestamptz AS not_before
  FROM locked l CROSS JOIN took t
UNION ALL
SELECT NULL, q.a, NULL, NULL, q.outstanding, q.quota_now,'
       || CASE WHEN p_slice IN (0, 1) THEN '
       (SELECT h.held FROM heldback h WHERE h.a = q.a)
       + CASE WHEN q.quota_now <= 0 THEN coalesce((SELECT groups FROM per WHERE per.a = q.a), 0)::integer ELSE 0 END,
       (SELECT h.held FROM heldback h WHERE h.a = q.a) = 0
         AND EXISTS (SELECT FROM cnt WHERE cnt.a = q.a AND cnt.cut)'
       ELSE '
       (SELECT count(*) FROM fits WHERE fits.a = q.a AND NOT fits.fits)::integer, false' END || ',
       NULL::timestamptz
  FROM room q';
    IF p_part = 'pick' THEN
        RETURN pick;
    END IF;
    -- The rows taken are locked one id at a time from the array (locked:
    -- a probe of the key per id, in a lateral sub-select that locks, so
    -- the planner cannot turn the join around). Written as o.id = ANY
    -- (the array), known only when the statement runs, the planner could
    -- read the pending rows' index instead and test each of them against
    -- the array: 19,345 rows tested against 200 ids took 220 ms of a 310
    -- ms lease in bench/e2e; written as a plain join with the array's
    -- elements, it put the elements inside the loop, 648,259 of them read
    -- for one lease of 181 rows (migration 00080).
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
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
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
      FROM clock c,
           (SELECT least(2 * coalesce(sum(cap), 0) + $4::integer, 2147483647)::integer AS n FROM acct) lim,
           owed_sweep_in_flight(c.now, c.horizon, c.live_until, $5::text[], $6::integer[], lim.n) f),
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
cnt AS MATERIALIZED (
    SELECT l.tenant_id, l.channel, l.a, x.due, x.total, x.total > per.per_group AS cut
      FROM live l JOIN per ON per.a = l.a AND per.per_group > 0
     CROSS JOIN clock c
     CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE y.owed_since <= c.now)::integer AS due, count(*)::integer AS total
          FROM (SELECT greatest(o.due_at, o.created_at) AS owed_since
                  FROM owed_notifications o
                 WHERE o.state = ''pending'' AND o.tenant_id = l.tenant_id AND o.channel = l.channel
                   AND greatest(o.due_at, o.created_at) <= c.horizon
                   AND (o.expires_at IS NULL OR o.expires_at > c.now)
                 ORDER BY greatest(o.due_at, o.created_at), o.due_at, o.id
                 LIMIT per.per_group + 1) y) x),
lists AS MATERIALIZED (
    SELECT k.tenant_id, k.a, sum(k.due)::integer AS due, coalesce(max(f.due_now), 0)::integer AS held
      FROM cnt k LEFT JOIN flight f ON f.tenant_id = k.tenant_id AND f.a = k.a
     GROUP BY k.tenant_id, k.a),
level AS MATERIALIZED (
    SELECT (array_agg(q.p ORDER BY q.p))[$4::integer] AS p
      FROM (SELECT ls.a, ls.held + s.k AS p,
                   row_number() OVER (PARTITION BY ls.a ORDER BY ls.held + s.k) AS turn
              FROM lists ls CROSS JOIN LATERAL generate_series(1, ls.due) s(k)) q
      JOIN room r ON r.a = q.a
     WHERE q.turn <= r.quota_now),
pend AS MATERIALIZED (
    SELECT k.tenant_id, k.a, x.id, x.owed_since, x.created_at, x.due_at
      FROM cnt k JOIN lists ls ON ls.tenant_id = k.tenant_id AND ls.a = k.a
     CROSS JOIN level lv
     CROSS JOIN clock c
     CROSS JOIN LATERAL (
        SELECT o.id, greatest(o.due_at, o.created_at) AS owed_since, o.created_at, o.due_at
          FROM owed_notifications o
         WHERE o.state = ''pending'' AND o.tenant_id = k.tenant_id AND o.channel = k.channel
           AND greatest(o.due_at, o.created_at) <= c.horizon
           AND (o.expires_at IS NULL OR o.expires_at > c.now)
         ORDER BY greatest(o.due_at, o.created_at), o.due_at, o.id
         LIMIT CASE WHEN lv.p IS NULL THEN k.total ELSE least(k.total, greatest(lv.p - ls.held, 0)) END) x)';
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
    IF p_slice IN (0, 1) THEN
        pick := pick || ',
heldback AS MATERIALIZED (
    SELECT q.a, (greatest(0, d.due - q.quota_now)
                 + greatest(0, d.ahead - greatest(0, q.quota_all - least(q.quota_now, d.due))))::integer AS held
      FROM room q CROSS JOIN clock c CROSS JOIN LATERAL (
        SELECT coalesce((SELECT sum(k.due) FROM cnt k WHERE k.a = q.a), 0)' || CASE WHEN p_slice = 0 THEN '
               + (SELECT count(*) FROM lapsed x WHERE x.a = q.a AND greatest(x.owed_since, x.not_before) <= c.now)'
               ELSE '' END || ' AS due,
               coalesce((SELECT sum(k.total - k.due) FROM cnt k WHERE k.a = q.a), 0)' || CASE WHEN p_slice = 0 THEN '
               + (SELECT count(*) FROM lapsed x WHERE x.a = q.a AND NOT greatest(x.owed_since, x.not_before) <= c.now)'
               ELSE '' END || ' AS ahead) d)';
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
SELECT NULL, q.a, NULL, NULL, q.outstanding, q.quota_now,'
       || CASE WHEN p_slice IN (0, 1) THEN '
       (SELECT h.held FROM heldback h WHERE h.a = q.a)
       + CASE WHEN q.quota_now <= 0 THEN coalesce((SELECT groups FROM per WHERE per.a = q.a), 0)::integer ELSE 0 END,
       (SELECT h.held FROM heldback h WHERE h.a = q.a) = 0
         AND EXISTS (SELECT FROM cnt WHERE cnt.a = q.a AND cnt.cut)'
       ELSE '
       (SELECT count(*) FROM fits WHERE fits.a = q.a AND NOT fits.fits)::integer, false' END || ',
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
REVOKE owed_definer FROM CURRENT_USER;
