-- Per-minute counters of the settled rows and of the attempts that may be
-- duplicates (owed_ledger_minutes, internal/ledger/sql/minutes.sql), kept
-- by statement triggers on owed_notifications and
-- owed_notification_attempts with one upsert per statement, and read by
-- owed_ledger_stats for windows longer than an hour
-- (owed_ledger_stats_minutes; a shorter window reads the rows,
-- owed_ledger_stats_rows, as before; internal/ledger/sql/operator.sql). On
-- a ledger that already holds rows the counting begins at the next minute
-- (owed_ledger_minutes_from), and a window reaching before it reads the
-- rows for that part. Expand-only: owed_ledger_stats keeps its signature
-- and its answer.

-- +goose Up
CREATE TABLE owed_ledger_minutes (
    minute    timestamptz      NOT NULL,
    tenant_id text             NOT NULL,
    outcome   text             NOT NULL,
    bucket    smallint         NOT NULL,
    slot      smallint         NOT NULL,
    -- How many: rows settled, or attempts finished.
    settled   bigint           NOT NULL,
    lag_min   double precision,
    lag_max   double precision,
    PRIMARY KEY (minute, tenant_id, outcome, bucket, slot)
);
GRANT SELECT, INSERT, UPDATE ON owed_ledger_minutes TO owed_definer;

CREATE TABLE owed_ledger_minutes_from (
    one    boolean     PRIMARY KEY DEFAULT true CHECK (one),
    minute timestamptz NOT NULL
);
GRANT SELECT ON owed_ledger_minutes_from TO owed_definer;
INSERT INTO owed_ledger_minutes_from (minute)
SELECT CASE WHEN EXISTS (SELECT FROM owed_notifications) THEN date_trunc('minute', now()) + interval '1 minute'
            ELSE '-infinity' END;

-- +goose StatementBegin
CREATE FUNCTION owed_lag_bucket(p_lag double precision) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN p_lag IS NULL THEN -1
            WHEN p_lag < 0.001 THEN 0
            ELSE least(floor(4 * ln(p_lag * 1000) / ln(2)) + 1, 32767) END::smallint
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_ledger_minutes_count() RETURNS trigger
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
-- +goose StatementBegin
CREATE FUNCTION owed_ledger_minutes_attempts() RETURNS trigger
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
-- The triggers are made while their functions are still the migration's:
-- a trigger's function is checked for EXECUTE when the trigger is created,
-- not when it fires.
CREATE TRIGGER owed_ledger_minutes_inserted
    AFTER INSERT ON owed_notifications
    REFERENCING NEW TABLE AS owed_new
    FOR EACH STATEMENT
    EXECUTE FUNCTION owed_ledger_minutes_count();
CREATE TRIGGER owed_ledger_minutes_updated
    AFTER UPDATE ON owed_notifications
    REFERENCING OLD TABLE AS owed_old NEW TABLE AS owed_new
    FOR EACH STATEMENT
    EXECUTE FUNCTION owed_ledger_minutes_count();
CREATE TRIGGER owed_ledger_minutes_attempted
    AFTER INSERT ON owed_notification_attempts
    REFERENCING NEW TABLE AS owed_new
    FOR EACH STATEMENT
    EXECUTE FUNCTION owed_ledger_minutes_attempts();
REVOKE EXECUTE ON FUNCTION owed_ledger_minutes_count() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION owed_ledger_minutes_attempts() FROM PUBLIC;
CALL owed_definer_takes_functions(ARRAY['owed_ledger_minutes_count', 'owed_ledger_minutes_attempts']);

-- +goose StatementBegin
CREATE FUNCTION owed_ledger_stats_rows(p_since timestamptz)
RETURNS TABLE (delivered bigint, expired bigint, failed bigint, skipped bigint, cancelled bigint,
               lag_p50 double precision, lag_p95 double precision, lag_max double precision,
               duplicate_rows bigint, possible_duplicates bigint)
LANGUAGE sql STABLE AS $$
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
REVOKE EXECUTE ON FUNCTION owed_ledger_stats_rows(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_stats_rows(timestamptz) TO owed_definer;

-- +goose StatementBegin
CREATE FUNCTION owed_ledger_stats_minutes(p_since timestamptz)
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
REVOKE EXECUTE ON FUNCTION owed_ledger_stats_minutes(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_stats_minutes(timestamptz) TO owed_definer;

GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_stats(p_since timestamptz)
RETURNS TABLE (delivered bigint, expired bigint, failed bigint, skipped bigint, cancelled bigint,
               lag_p50 double precision, lag_p95 double precision, lag_max double precision,
               duplicate_rows bigint, possible_duplicates bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF p_since >= now() - interval '65 minutes' THEN
        RETURN QUERY SELECT * FROM owed_ledger_stats_rows(p_since);
    ELSE
        RETURN QUERY SELECT * FROM owed_ledger_stats_minutes(p_since);
    END IF;
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_stats(p_since timestamptz)
RETURNS TABLE (delivered bigint, expired bigint, failed bigint, skipped bigint, cancelled bigint,
               lag_p50 double precision, lag_p95 double precision, lag_max double precision,
               duplicate_rows bigint, possible_duplicates bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
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
DROP TRIGGER owed_ledger_minutes_attempted ON owed_notification_attempts;
DROP TRIGGER owed_ledger_minutes_updated ON owed_notifications;
DROP TRIGGER owed_ledger_minutes_inserted ON owed_notifications;
DROP FUNCTION owed_ledger_minutes_attempts();
DROP FUNCTION owed_ledger_minutes_count();
REVOKE owed_definer FROM CURRENT_USER;
DROP FUNCTION owed_ledger_stats_minutes(timestamptz);
DROP FUNCTION owed_ledger_stats_rows(timestamptz);
DROP FUNCTION owed_lag_bucket(double precision);
DROP TABLE owed_ledger_minutes_from;
DROP TABLE owed_ledger_minutes;
