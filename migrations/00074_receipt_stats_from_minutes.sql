-- The receipt stats of a window longer than an hour from the per-minute
-- counters (owed_ledger_receipt_stats, internal/ledger/sql/receipts.sql):
-- owed_ledger_minutes also counts, by the minute a delivered row settled,
-- a provider's final word on it (receipt_delivered, receipt_bounced,
-- receipt_failed), kept by owed_ledger_minutes_count from receipt_status
-- (internal/ledger/sql/minutes.sql). A day's receipt stats read a day of
-- the ledger's rows before. On a ledger that already holds rows the
-- receipts' words are counted from the next minute
-- (owed_ledger_minutes_from.receipts), and a window reaching before it
-- reads the rows for that part. Expand-only: owed_ledger_receipt_stats
-- keeps its signature and its answer.

-- +goose Up
ALTER TABLE owed_ledger_minutes_from ADD COLUMN receipts timestamptz;
UPDATE owed_ledger_minutes_from
   SET receipts = CASE WHEN EXISTS (SELECT FROM owed_notifications)
                       THEN date_trunc('minute', now()) + interval '1 minute' ELSE '-infinity' END;
ALTER TABLE owed_ledger_minutes_from ALTER COLUMN receipts SET NOT NULL;

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
WITH edge AS MATERIALIZED (
    SELECT greatest(CASE WHEN date_trunc('minute', $1) = $1 THEN $1
                         ELSE date_trunc('minute', $1) + interval '1 minute' END,
                    (SELECT greatest(f.minute, f.receipts) FROM owed_ledger_minutes_from f)) AS at
), parts AS (
    SELECT m.outcome, m.settled
      FROM edge e JOIN owed_ledger_minutes m ON m.minute >= e.at
     WHERE m.outcome IN ('delivered', 'receipt_delivered', 'receipt_bounced', 'receipt_failed')
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

GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_minutes_count() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO owed_ledger_minutes AS m (minute, tenant_id, outcome, bucket, slot, settled, lag_min, lag_max)
        SELECT d.minute, d.tenant_id, d.outcome, owed_lag_bucket(d.lag), pg_backend_pid() % 8, count(*), min(d.lag),
               max(d.lag)
          FROM (SELECT date_trunc('minute', n.settled_at) AS minute, n.tenant_id, w.outcome, w.lag
                  FROM owed_new n
                 CROSS JOIN LATERAL owed_ledger_minutes_words(n.state, n.delivered_at, n.due_at, n.receipt_status) w
                 WHERE n.settled_at IS NOT NULL) d
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
               o.delivered_at AS old_delivered, o.due_at AS old_due, o.receipt_status AS old_receipt,
               n.tenant_id AS new_tenant, n.state AS new_state, n.settled_at AS new_settled,
               n.delivered_at AS new_delivered, n.due_at AS new_due, n.receipt_status AS new_receipt
          FROM owed_new n JOIN owed_old o ON o.id = n.id
         WHERE (o.settled_at IS NOT NULL OR n.settled_at IS NOT NULL)
           AND (o.settled_at, o.tenant_id, o.state, o.delivered_at, o.due_at, o.receipt_status)
               IS DISTINCT FROM (n.settled_at, n.tenant_id, n.state, n.delivered_at, n.due_at, n.receipt_status)
    ), d AS (
        -- A word the row keeps (its state when only its receipt moved)
        -- is added and taken off in the same group, and the HAVING below
        -- drops the group.
        SELECT date_trunc('minute', c.new_settled) AS minute, c.new_tenant AS tenant_id, w.outcome, w.lag, 1 AS sign
          FROM changed c
         CROSS JOIN LATERAL owed_ledger_minutes_words(c.new_state, c.new_delivered, c.new_due, c.new_receipt) w
         WHERE c.new_settled IS NOT NULL
        UNION ALL
        SELECT date_trunc('minute', c.old_settled), c.old_tenant, w.outcome, w.lag, -1
          FROM changed c
         CROSS JOIN LATERAL owed_ledger_minutes_words(c.old_state, c.old_delivered, c.old_due, c.old_receipt) w
         WHERE c.old_settled IS NOT NULL
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
DROP FUNCTION owed_ledger_receipt_stats_minutes(timestamptz);
DROP FUNCTION owed_ledger_receipt_stats_rows(timestamptz);
DROP FUNCTION owed_ledger_minutes_words(text, timestamptz, timestamptz, text);
DELETE FROM owed_ledger_minutes WHERE outcome IN ('receipt_delivered', 'receipt_bounced', 'receipt_failed');
ALTER TABLE owed_ledger_minutes_from DROP COLUMN receipts;
