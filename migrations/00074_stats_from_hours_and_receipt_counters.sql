-- Long stats windows read hours, and the receipt stats read counters too
-- (internal/ledger/sql/minutes.sql, operator.sql, receipts.sql).
-- owed_ledger_hours sums the per-minute counters by hour across tenants,
-- kept with them by owed_ledger_counters_add, so a day's window of
-- owed_ledger_stats reads 24 hours of a few rows each instead of 1,440
-- minutes of a row per tenant. owed_ledger_minutes also counts a
-- delivered row's receipt word (receipt_delivered, receipt_bounced,
-- receipt_failed) by the minute it settled, and owed_ledger_receipt_stats
-- reads a window over 65 minutes from the counters
-- (owed_ledger_receipt_stats_minutes) instead of the window's rows. On a
-- ledger that already holds rows the receipt words are counted from the
-- next minute (owed_ledger_minutes_from.receipts) and the hours from the
-- second hour after this one (owed_ledger_minutes_from.hours: a statement
-- still running the previous trigger body near the hour's turn cannot
-- miss them); a window reaching before either reads the minutes, or the
-- rows, for that part. Expand-only: both stats keep their signatures and
-- their answers.

-- +goose Up
ALTER TABLE owed_ledger_minutes_from ADD COLUMN receipts timestamptz;
ALTER TABLE owed_ledger_minutes_from ADD COLUMN hours timestamptz;
UPDATE owed_ledger_minutes_from
   SET receipts = CASE WHEN EXISTS (SELECT FROM owed_notifications) OR EXISTS (SELECT FROM owed_ledger_minutes)
                       THEN date_trunc('minute', now()) + interval '1 minute' ELSE '-infinity' END,
       hours = CASE WHEN EXISTS (SELECT FROM owed_notifications) OR EXISTS (SELECT FROM owed_ledger_minutes)
                    THEN date_trunc('hour', now()) + interval '2 hours' ELSE '-infinity' END;
ALTER TABLE owed_ledger_minutes_from ALTER COLUMN receipts SET NOT NULL;
ALTER TABLE owed_ledger_minutes_from ALTER COLUMN hours SET NOT NULL;

CREATE TABLE owed_ledger_hours (
    hour      timestamptz      NOT NULL,
    outcome   text             NOT NULL,
    bucket    smallint         NOT NULL,
    slot      smallint         NOT NULL,
    settled   bigint           NOT NULL,
    lag_min   double precision,
    lag_max   double precision,
    PRIMARY KEY (hour, outcome, bucket, slot)
);
GRANT SELECT, INSERT, UPDATE ON owed_ledger_hours TO owed_definer;

-- +goose StatementBegin
CREATE FUNCTION owed_ledger_minutes_words(p_state text, p_delivered_at timestamptz, p_due_at timestamptz,
                                          p_receipt_status text)
RETURNS TABLE (outcome text, lag double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT p_state, CASE WHEN p_state = 'delivered' THEN extract(epoch FROM p_delivered_at - p_due_at)::double precision END
UNION ALL
SELECT 'receipt_' || p_receipt_status, NULL
 WHERE p_state = 'delivered' AND p_receipt_status IN ('delivered', 'bounced', 'failed')
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_ledger_counters_add(p_minute timestamptz[], p_tenant text[], p_outcome text[],
                                         p_bucket smallint[], p_settled bigint[], p_lag_min double precision[],
                                         p_lag_max double precision[])
RETURNS void
LANGUAGE sql AS $$
WITH g AS MATERIALIZED (
    SELECT * FROM unnest(p_minute, p_tenant, p_outcome, p_bucket, p_settled, p_lag_min, p_lag_max)
                  AS g (minute, tenant_id, outcome, bucket, settled, lag_min, lag_max)
), m AS (
    INSERT INTO owed_ledger_minutes AS m (minute, tenant_id, outcome, bucket, slot, settled, lag_min, lag_max)
    SELECT g.minute, g.tenant_id, g.outcome, g.bucket, pg_backend_pid() % 8, g.settled, g.lag_min, g.lag_max
      FROM g
     ORDER BY 1, 2, 3, 4
    ON CONFLICT (minute, tenant_id, outcome, bucket, slot) DO UPDATE
       SET settled = m.settled + EXCLUDED.settled, lag_min = least(m.lag_min, EXCLUDED.lag_min),
           lag_max = greatest(m.lag_max, EXCLUDED.lag_max)
    RETURNING 1
)
INSERT INTO owed_ledger_hours AS h (hour, outcome, bucket, slot, settled, lag_min, lag_max)
SELECT date_trunc('hour', g.minute), g.outcome, g.bucket, pg_backend_pid() % 8, sum(g.settled), min(g.lag_min),
       max(g.lag_max)
  FROM g
 WHERE (SELECT count(*) FROM m) >= 0
 GROUP BY 1, 2, 3
 ORDER BY 1, 2, 3
ON CONFLICT (hour, outcome, bucket, slot) DO UPDATE
   SET settled = h.settled + EXCLUDED.settled, lag_min = least(h.lag_min, EXCLUDED.lag_min),
       lag_max = greatest(h.lag_max, EXCLUDED.lag_max)
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_ledger_counters_add(timestamptz[], text[], text[], smallint[], bigint[],
                                                    double precision[], double precision[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_counters_add(timestamptz[], text[], text[], smallint[], bigint[],
                                                    double precision[], double precision[]) TO owed_definer;

-- +goose StatementBegin
CREATE FUNCTION owed_ledger_receipt_stats_rows(p_since timestamptz)
RETURNS TABLE (accepted bigint, confirmed_delivered bigint, bounced bigint, failed bigint, unconfirmed bigint)
LANGUAGE sql STABLE AS $$
SELECT count(*),
       count(*) FILTER (WHERE receipt_status = 'delivered'),
       count(*) FILTER (WHERE receipt_status = 'bounced'),
       count(*) FILTER (WHERE receipt_status = 'failed'),
       count(*) FILTER (WHERE receipt_status IS NULL OR receipt_status IN ('sent', 'deferred'))
  FROM owed_notifications WHERE state = 'delivered' AND settled_at >= $1
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_ledger_receipt_stats_rows(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_receipt_stats_rows(timestamptz) TO owed_definer;

-- +goose StatementBegin
CREATE FUNCTION owed_ledger_receipt_stats_minutes(p_since timestamptz)
RETURNS TABLE (accepted bigint, confirmed_delivered bigint, bounced bigint, failed bigint, unconfirmed bigint)
LANGUAGE sql STABLE AS $$
WITH edge0 AS MATERIALIZED (
    SELECT greatest(CASE WHEN date_trunc('minute', $1) = $1 THEN $1
                         ELSE date_trunc('minute', $1) + interval '1 minute' END,
                    (SELECT greatest(f.minute, f.receipts) FROM owed_ledger_minutes_from f)) AS at,
           (SELECT f.hours FROM owed_ledger_minutes_from f) AS hours
), edge AS MATERIALIZED (
    SELECT e.at, greatest(CASE WHEN date_trunc('hour', e.at) = e.at THEN e.at
                               ELSE date_trunc('hour', e.at) + interval '1 hour' END,
                          e.hours) AS hour
      FROM edge0 e
), parts AS (
    SELECT m.outcome, m.settled
      FROM edge e JOIN owed_ledger_minutes m ON m.minute >= e.at AND m.minute < e.hour
                                              AND m.minute >= date_trunc('minute', $1)
     WHERE m.outcome IN ('delivered', 'receipt_delivered', 'receipt_bounced', 'receipt_failed')
    UNION ALL
    SELECT h.outcome, h.settled
      FROM edge e JOIN owed_ledger_hours h ON h.hour >= e.hour
     WHERE h.outcome IN ('delivered', 'receipt_delivered', 'receipt_bounced', 'receipt_failed')
    UNION ALL
    SELECT w.outcome, 1
      FROM edge e
      JOIN owed_notifications n ON n.state = 'delivered' AND n.settled_at >= $1 AND n.settled_at < e.at
     CROSS JOIN LATERAL owed_ledger_minutes_words(n.state, n.delivered_at, n.due_at, n.receipt_status) w
), sums AS (
    SELECT coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'delivered'), 0)::bigint AS accepted,
           coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'receipt_delivered'), 0)::bigint AS delivered,
           coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'receipt_bounced'), 0)::bigint AS bounced,
           coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'receipt_failed'), 0)::bigint AS failed
      FROM parts p
)
SELECT s.accepted, s.delivered, s.bounced, s.failed, s.accepted - s.delivered - s.bounced - s.failed FROM sums s
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_ledger_receipt_stats_minutes(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_receipt_stats_minutes(timestamptz) TO owed_definer;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_stats_minutes(p_since timestamptz)
RETURNS TABLE (delivered bigint, expired bigint, failed bigint, skipped bigint, cancelled bigint,
               lag_p50 double precision, lag_p95 double precision, lag_max double precision,
               duplicate_rows bigint, possible_duplicates bigint)
LANGUAGE sql STABLE AS $$
WITH edge0 AS MATERIALIZED (
    SELECT greatest(CASE WHEN date_trunc('minute', $1) = $1 THEN $1
                         ELSE date_trunc('minute', $1) + interval '1 minute' END,
                    (SELECT f.minute FROM owed_ledger_minutes_from f)) AS at,
           (SELECT f.hours FROM owed_ledger_minutes_from f) AS hours
), edge AS MATERIALIZED (
    SELECT e.at, greatest(CASE WHEN date_trunc('hour', e.at) = e.at THEN e.at
                               ELSE date_trunc('hour', e.at) + interval '1 hour' END,
                          e.hours) AS hour
      FROM edge0 e
), parts AS MATERIALIZED (
    SELECT m.outcome, m.bucket, m.settled, m.lag_min, m.lag_max
      FROM edge e JOIN owed_ledger_minutes m ON m.minute >= e.at AND m.minute < e.hour
                                              AND m.minute >= date_trunc('minute', $1)
    UNION ALL
    SELECT h.outcome, h.bucket, h.settled, h.lag_min, h.lag_max
      FROM edge e JOIN owed_ledger_hours h ON h.hour >= e.hour
    UNION ALL
    SELECT r.state, owed_lag_bucket(r.lag), 1, r.lag, r.lag
      FROM edge e CROSS JOIN LATERAL (
        SELECT n.state, CASE WHEN n.state = 'delivered'
                             THEN extract(epoch FROM n.delivered_at - n.due_at)::double precision END AS lag
          FROM owed_notifications n
         WHERE n.settled_at >= $1 AND n.settled_at < e.at) r
    UNION ALL
    SELECT x.outcome, -1, 1, NULL, NULL
      FROM edge e
      JOIN owed_notification_attempts a ON a.finished_at >= $1 AND a.finished_at < e.at
     CROSS JOIN LATERAL (
        SELECT 'possible_duplicate' AS outcome WHERE a.possible_duplicate
        UNION ALL
        SELECT 'accepted_again'
         WHERE a.outcome = 'accepted'
           AND EXISTS (SELECT FROM owed_notification_attempts p
                        WHERE p.notification_id = a.notification_id AND p.attempt < a.attempt
                          AND p.outcome = 'accepted')) x
), lags AS (
    SELECT p.bucket, sum(p.settled) AS n, min(p.lag_min) AS lo, max(p.lag_max) AS hi
      FROM parts p WHERE p.outcome = 'delivered'
     GROUP BY p.bucket HAVING sum(p.settled) > 0
), ranked AS MATERIALIZED (
    SELECT l.bucket, l.n, l.lo, l.hi, sum(l.n) OVER (ORDER BY l.bucket) - l.n AS before, sum(l.n) OVER () AS total
      FROM lags l
), pct AS (
    SELECT q.p, (SELECT r.lo + (r.hi - r.lo) * CASE WHEN r.n > 1
                                                    THEN least((q.p * (r.total - 1) - r.before) / (r.n - 1), 1)
                                                    ELSE 0 END::double precision
                   FROM ranked r
                  WHERE r.before <= floor(q.p * (r.total - 1)) AND floor(q.p * (r.total - 1)) < r.before + r.n) AS lag
      FROM (VALUES (0.5), (0.95)) q (p)
)
SELECT coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'delivered'), 0)::bigint,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'expired'), 0)::bigint,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'failed'), 0)::bigint,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'skipped'), 0)::bigint,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'cancelled'), 0)::bigint,
       coalesce((SELECT pct.lag FROM pct WHERE pct.p = 0.5), 0)::double precision,
       coalesce((SELECT pct.lag FROM pct WHERE pct.p = 0.95), 0)::double precision,
       coalesce((SELECT max(r.hi) FROM ranked r), 0)::double precision,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'accepted_again'), 0)::bigint,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'possible_duplicate'), 0)::bigint
  FROM parts p
$$;
-- +goose StatementEnd

GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_minutes_count() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM owed_ledger_counters_add(array_agg(c.minute), array_agg(c.tenant_id), array_agg(c.outcome),
                                         array_agg(c.bucket), array_agg(c.settled), array_agg(c.lag_min),
                                         array_agg(c.lag_max))
           FROM (SELECT d.minute, d.tenant_id, d.outcome, owed_lag_bucket(d.lag) AS bucket, count(*) AS settled,
                        min(d.lag) AS lag_min, max(d.lag) AS lag_max
                   FROM (SELECT date_trunc('minute', n.settled_at) AS minute, n.tenant_id, w.outcome, w.lag
                           FROM owed_new n
                          CROSS JOIN LATERAL owed_ledger_minutes_words(n.state, n.delivered_at, n.due_at,
                                                                       n.receipt_status) w
                          WHERE n.settled_at IS NOT NULL) d
                  GROUP BY 1, 2, 3, 4) c;
        RETURN NULL;
    END IF;
    -- Most updates settle nothing and unsettle nothing (the lease, the
    -- queued mark, the claim, the heartbeat): a look at each side's rows
    -- answers them without the join below.
    IF NOT EXISTS (SELECT FROM owed_new WHERE settled_at IS NOT NULL)
       AND NOT EXISTS (SELECT FROM owed_old WHERE settled_at IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    PERFORM owed_ledger_counters_add(array_agg(c.minute), array_agg(c.tenant_id), array_agg(c.outcome),
                                     array_agg(c.bucket), array_agg(c.settled), array_agg(c.lag_min),
                                     array_agg(c.lag_max))
       FROM (WITH changed AS (
                 SELECT o.tenant_id AS old_tenant, o.state AS old_state, o.settled_at AS old_settled,
                        o.delivered_at AS old_delivered, o.due_at AS old_due, o.receipt_status AS old_receipt,
                        n.tenant_id AS new_tenant, n.state AS new_state, n.settled_at AS new_settled,
                        n.delivered_at AS new_delivered, n.due_at AS new_due, n.receipt_status AS new_receipt
                   FROM owed_new n JOIN owed_old o ON o.id = n.id
                  WHERE (o.settled_at IS NOT NULL OR n.settled_at IS NOT NULL)
                    AND (o.settled_at, o.tenant_id, o.state, o.delivered_at, o.due_at, o.receipt_status)
                        IS DISTINCT FROM (n.settled_at, n.tenant_id, n.state, n.delivered_at, n.due_at, n.receipt_status)
             ), d AS (
                 -- A word the row keeps (its state when only its receipt
                 -- moved) is added and taken off in the same group, and
                 -- the HAVING below drops the group.
                 SELECT date_trunc('minute', c.new_settled) AS minute, c.new_tenant AS tenant_id, w.outcome, w.lag,
                        1 AS sign
                   FROM changed c
                  CROSS JOIN LATERAL owed_ledger_minutes_words(c.new_state, c.new_delivered, c.new_due,
                                                               c.new_receipt) w
                  WHERE c.new_settled IS NOT NULL
                 UNION ALL
                 SELECT date_trunc('minute', c.old_settled), c.old_tenant, w.outcome, w.lag, -1
                   FROM changed c
                  CROSS JOIN LATERAL owed_ledger_minutes_words(c.old_state, c.old_delivered, c.old_due,
                                                               c.old_receipt) w
                  WHERE c.old_settled IS NOT NULL
             )
             SELECT d.minute, d.tenant_id, d.outcome, owed_lag_bucket(d.lag) AS bucket, sum(d.sign) AS settled,
                    min(d.lag) FILTER (WHERE d.sign > 0) AS lag_min, max(d.lag) FILTER (WHERE d.sign > 0) AS lag_max
               FROM d
              GROUP BY 1, 2, 3, 4
             HAVING sum(d.sign) <> 0) c;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_minutes_attempts() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM owed_ledger_counters_add(array_agg(c.minute), array_agg(c.tenant_id), array_agg(c.outcome),
                                     array_agg(c.bucket), array_agg(c.settled), array_agg(c.lag_min),
                                     array_agg(c.lag_max))
       FROM (SELECT date_trunc('minute', a.finished_at) AS minute, a.tenant_id, x.outcome, (-1)::smallint AS bucket,
                    count(*) AS settled, NULL::double precision AS lag_min, NULL::double precision AS lag_max
               FROM owed_new a
              CROSS JOIN LATERAL (
                 SELECT 'possible_duplicate' AS outcome WHERE a.possible_duplicate
                 UNION ALL
                 SELECT 'accepted_again'
                  WHERE a.outcome = 'accepted'
                    AND EXISTS (SELECT FROM owed_notification_attempts p
                                 WHERE p.notification_id = a.notification_id AND p.attempt < a.attempt
                                   AND p.outcome = 'accepted')) x
              GROUP BY 1, 2, 3) c;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_receipt_stats(p_since timestamptz)
RETURNS TABLE (accepted bigint, confirmed_delivered bigint, bounced bigint, failed bigint, unconfirmed bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF p_since >= now() - interval '65 minutes' THEN
        RETURN QUERY SELECT * FROM owed_ledger_receipt_stats_rows(p_since);
    ELSE
        RETURN QUERY SELECT * FROM owed_ledger_receipt_stats_minutes(p_since);
    END IF;
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_receipt_stats(p_since timestamptz)
RETURNS TABLE (accepted bigint, confirmed_delivered bigint, bounced bigint, failed bigint, unconfirmed bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT count(*),
       count(*) FILTER (WHERE receipt_status = 'delivered'),
       count(*) FILTER (WHERE receipt_status = 'bounced'),
       count(*) FILTER (WHERE receipt_status = 'failed'),
       count(*) FILTER (WHERE receipt_status IS NULL OR receipt_status IN ('sent', 'deferred'))
  FROM owed_notifications WHERE state = 'delivered' AND settled_at >= $1
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_minutes_attempts() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO owed_ledger_minutes AS m (minute, tenant_id, outcome, bucket, slot, settled)
    SELECT date_trunc('minute', a.finished_at), a.tenant_id, x.outcome, -1, pg_backend_pid() % 8, count(*)
      FROM owed_new a
     CROSS JOIN LATERAL (
        SELECT 'possible_duplicate' AS outcome WHERE a.possible_duplicate
        UNION ALL
        SELECT 'accepted_again'
         WHERE a.outcome = 'accepted'
           AND EXISTS (SELECT FROM owed_notification_attempts p
                        WHERE p.notification_id = a.notification_id AND p.attempt < a.attempt
                          AND p.outcome = 'accepted')) x
     GROUP BY 1, 2, 3
     ORDER BY 1, 2, 3
    ON CONFLICT (minute, tenant_id, outcome, bucket, slot) DO UPDATE SET settled = m.settled + EXCLUDED.settled;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_minutes_count() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO owed_ledger_minutes AS m (minute, tenant_id, outcome, bucket, slot, settled, lag_min, lag_max)
        SELECT d.minute, d.tenant_id, d.outcome, owed_lag_bucket(d.lag), pg_backend_pid() % 8, count(*), min(d.lag),
               max(d.lag)
          FROM (SELECT date_trunc('minute', n.settled_at) AS minute, n.tenant_id, n.state AS outcome,
                       CASE WHEN n.state = 'delivered'
                            THEN extract(epoch FROM n.delivered_at - n.due_at)::double precision END AS lag
                  FROM owed_new n WHERE n.settled_at IS NOT NULL) d
         GROUP BY 1, 2, 3, 4
         ORDER BY 1, 2, 3, 4
        ON CONFLICT (minute, tenant_id, outcome, bucket, slot) DO UPDATE
           SET settled = m.settled + EXCLUDED.settled, lag_min = least(m.lag_min, EXCLUDED.lag_min),
               lag_max = greatest(m.lag_max, EXCLUDED.lag_max);
        RETURN NULL;
    END IF;
    -- Most updates settle nothing and unsettle nothing (the lease, the
    -- queued mark, the claim, the heartbeat): a look at each side's rows
    -- answers them without the join below.
    IF NOT EXISTS (SELECT FROM owed_new WHERE settled_at IS NOT NULL)
       AND NOT EXISTS (SELECT FROM owed_old WHERE settled_at IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    WITH changed AS (
        SELECT o.tenant_id AS old_tenant, o.state AS old_state, o.settled_at AS old_settled,
               CASE WHEN o.state = 'delivered' THEN extract(epoch FROM o.delivered_at - o.due_at)::double precision END
                 AS old_lag,
               n.tenant_id AS new_tenant, n.state AS new_state, n.settled_at AS new_settled,
               CASE WHEN n.state = 'delivered' THEN extract(epoch FROM n.delivered_at - n.due_at)::double precision END
                 AS new_lag
          FROM owed_new n JOIN owed_old o ON o.id = n.id
         WHERE (o.settled_at IS NOT NULL OR n.settled_at IS NOT NULL)
           AND (o.settled_at, o.tenant_id, o.state, o.delivered_at, o.due_at)
               IS DISTINCT FROM (n.settled_at, n.tenant_id, n.state, n.delivered_at, n.due_at)
    ), d AS (
        SELECT date_trunc('minute', new_settled) AS minute, new_tenant AS tenant_id, new_state AS outcome,
               new_lag AS lag, 1 AS sign
          FROM changed WHERE new_settled IS NOT NULL
        UNION ALL
        SELECT date_trunc('minute', old_settled), old_tenant, old_state, old_lag, -1
          FROM changed WHERE old_settled IS NOT NULL
    )
    INSERT INTO owed_ledger_minutes AS m (minute, tenant_id, outcome, bucket, slot, settled, lag_min, lag_max)
    SELECT d.minute, d.tenant_id, d.outcome, owed_lag_bucket(d.lag), pg_backend_pid() % 8, sum(d.sign),
           min(d.lag) FILTER (WHERE d.sign > 0), max(d.lag) FILTER (WHERE d.sign > 0)
      FROM d
     GROUP BY 1, 2, 3, 4
    HAVING sum(d.sign) <> 0
     ORDER BY 1, 2, 3, 4
    ON CONFLICT (minute, tenant_id, outcome, bucket, slot) DO UPDATE
       SET settled = m.settled + EXCLUDED.settled, lag_min = least(m.lag_min, EXCLUDED.lag_min),
           lag_max = greatest(m.lag_max, EXCLUDED.lag_max);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_stats_minutes(p_since timestamptz)
RETURNS TABLE (delivered bigint, expired bigint, failed bigint, skipped bigint, cancelled bigint,
               lag_p50 double precision, lag_p95 double precision, lag_max double precision,
               duplicate_rows bigint, possible_duplicates bigint)
LANGUAGE sql STABLE AS $$
WITH edge AS MATERIALIZED (
    SELECT greatest(CASE WHEN date_trunc('minute', $1) = $1 THEN $1
                         ELSE date_trunc('minute', $1) + interval '1 minute' END,
                    (SELECT f.minute FROM owed_ledger_minutes_from f)) AS at
), parts AS MATERIALIZED (
    SELECT m.outcome, m.bucket, m.settled, m.lag_min, m.lag_max
      FROM edge e JOIN owed_ledger_minutes m ON m.minute >= e.at
    UNION ALL
    SELECT r.state, owed_lag_bucket(r.lag), 1, r.lag, r.lag
      FROM edge e CROSS JOIN LATERAL (
        SELECT n.state, CASE WHEN n.state = 'delivered'
                             THEN extract(epoch FROM n.delivered_at - n.due_at)::double precision END AS lag
          FROM owed_notifications n
         WHERE n.settled_at >= $1 AND n.settled_at < e.at) r
    UNION ALL
    SELECT x.outcome, -1, 1, NULL, NULL
      FROM edge e
      JOIN owed_notification_attempts a ON a.finished_at >= $1 AND a.finished_at < e.at
     CROSS JOIN LATERAL (
        SELECT 'possible_duplicate' AS outcome WHERE a.possible_duplicate
        UNION ALL
        SELECT 'accepted_again'
         WHERE a.outcome = 'accepted'
           AND EXISTS (SELECT FROM owed_notification_attempts p
                        WHERE p.notification_id = a.notification_id AND p.attempt < a.attempt
                          AND p.outcome = 'accepted')) x
), lags AS (
    SELECT p.bucket, sum(p.settled) AS n, min(p.lag_min) AS lo, max(p.lag_max) AS hi
      FROM parts p WHERE p.outcome = 'delivered'
     GROUP BY p.bucket HAVING sum(p.settled) > 0
), ranked AS MATERIALIZED (
    SELECT l.bucket, l.n, l.lo, l.hi, sum(l.n) OVER (ORDER BY l.bucket) - l.n AS before, sum(l.n) OVER () AS total
      FROM lags l
), pct AS (
    SELECT q.p, (SELECT r.lo + (r.hi - r.lo) * CASE WHEN r.n > 1
                                                    THEN least((q.p * (r.total - 1) - r.before) / (r.n - 1), 1)
                                                    ELSE 0 END::double precision
                   FROM ranked r
                  WHERE r.before <= floor(q.p * (r.total - 1)) AND floor(q.p * (r.total - 1)) < r.before + r.n) AS lag
      FROM (VALUES (0.5), (0.95)) q (p)
)
SELECT coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'delivered'), 0)::bigint,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'expired'), 0)::bigint,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'failed'), 0)::bigint,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'skipped'), 0)::bigint,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'cancelled'), 0)::bigint,
       coalesce((SELECT pct.lag FROM pct WHERE pct.p = 0.5), 0)::double precision,
       coalesce((SELECT pct.lag FROM pct WHERE pct.p = 0.95), 0)::double precision,
       coalesce((SELECT max(r.hi) FROM ranked r), 0)::double precision,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'accepted_again'), 0)::bigint,
       coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'possible_duplicate'), 0)::bigint
  FROM parts p
$$;
-- +goose StatementEnd
DROP FUNCTION owed_ledger_receipt_stats_minutes(timestamptz);
DROP FUNCTION owed_ledger_receipt_stats_rows(timestamptz);
DROP FUNCTION owed_ledger_counters_add(timestamptz[], text[], text[], smallint[], bigint[],
                                                    double precision[], double precision[]);
DROP FUNCTION owed_ledger_minutes_words(text, timestamptz, timestamptz, text);
DROP TABLE owed_ledger_hours;
DELETE FROM owed_ledger_minutes WHERE outcome IN ('receipt_delivered', 'receipt_bounced', 'receipt_failed');
ALTER TABLE owed_ledger_minutes_from DROP COLUMN hours;
ALTER TABLE owed_ledger_minutes_from DROP COLUMN receipts;
