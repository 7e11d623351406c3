-- A settle's counters cost less. owed_ledger_counters_add is PL/pgSQL, so
-- its upserts are planned once per session instead of at every call (an
-- SQL function's body is planned each time: about 0.2 ms, twice a settle),
-- and it returns at once when there is nothing to count (the attempts'
-- trigger calls it for every insert of attempts, and an accepted first
-- attempt counts nothing). The attempts' trigger and
-- owed_ledger_minutes_uncount look for an earlier accepted attempt only
-- after the first attempt (attempt >= 1 is a check of the table), so a
-- first send no longer probes each month partition of the attempts. The
-- rows' trigger (owed_ledger_minutes_count) adds every settled row of the
-- new side and takes off every one of the old, without joining the two
-- sides: a row whose settlement did not change cancels out in its group,
-- as a word a row keeps did already, and the worker's batches, which plan
-- without hash joins (migration 00083), would have joined them by a nested
-- loop. Same signatures, same counts.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_counters_add(p_minute timestamptz[], p_tenant text[], p_outcome text[],
                                         p_bucket smallint[], p_settled bigint[], p_lag_min double precision[],
                                         p_lag_max double precision[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_minute IS NULL THEN
        RETURN;
    END IF;
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
           lag_max = greatest(h.lag_max, EXCLUDED.lag_max);
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_minutes_uncount(p_ids bigint[], p_attempt_rows bigint[], p_attempt_ids bigint[])
RETURNS void
LANGUAGE sql SET search_path = pg_catalog, public AS $$
SELECT owed_ledger_counters_add(array_agg(c.minute), array_agg(c.tenant_id), array_agg(c.outcome),
                                array_agg(c.bucket), array_agg(c.settled), array_agg(NULL::double precision),
                                array_agg(NULL::double precision))
  FROM (SELECT d.minute, d.tenant_id, d.outcome, d.bucket, -sum(d.n)::bigint AS settled
          FROM (SELECT date_trunc('minute', r.settled_at) AS minute, r.tenant_id, w.outcome,
                       owed_lag_bucket(w.lag) AS bucket, count(*) AS n
                  FROM owed_notifications r
                 CROSS JOIN LATERAL owed_ledger_minutes_words(r.state, r.delivered_at, r.due_at, r.receipt_status) w
                 WHERE r.id = ANY (p_ids) AND r.settled_at IS NOT NULL
                 GROUP BY 1, 2, 3, 4
                UNION ALL
                SELECT date_trunc('minute', a.finished_at), a.tenant_id, x.outcome, -1::smallint, count(*)
                  FROM unnest(p_attempt_rows, p_attempt_ids) AS u(notification_id, id)
                  JOIN owed_notification_attempts a ON a.notification_id = u.notification_id AND a.id = u.id
                 CROSS JOIN LATERAL (
                    SELECT 'possible_duplicate' AS outcome WHERE a.possible_duplicate
                    UNION ALL
                    SELECT 'accepted_again'
                     WHERE a.outcome = 'accepted' AND a.attempt > 1
                       AND EXISTS (SELECT FROM owed_notification_attempts p
                                    WHERE p.notification_id = a.notification_id AND p.attempt < a.attempt
                                      AND p.outcome = 'accepted')) x
                 GROUP BY 1, 2, 3, 4) d
         GROUP BY 1, 2, 3, 4) c
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
    -- answers them without the words below.
    IF NOT EXISTS (SELECT FROM owed_new WHERE settled_at IS NOT NULL)
       AND NOT EXISTS (SELECT FROM owed_old WHERE settled_at IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    PERFORM owed_ledger_counters_add(array_agg(c.minute), array_agg(c.tenant_id), array_agg(c.outcome),
                                     array_agg(c.bucket), array_agg(c.settled), array_agg(c.lag_min),
                                     array_agg(c.lag_max))
       FROM (WITH d AS (
                 -- Every settled row of each side, the new added and the
                 -- old taken off. A row whose settlement the statement did
                 -- not change (its minute, tenant, words and lag are the
                 -- same on both sides) is added and taken off in the same
                 -- group, which the HAVING below drops; so is a word a row
                 -- keeps (its state when only its receipt moved). No join
                 -- of the two sides: the worker's batches, which fire this
                 -- trigger, plan without hash joins (owed_claim_many,
                 -- claim.sql), and a nested loop over a settle of a
                 -- thousand rows compares a million pairs. The lag bounds
                 -- of a group may take in a row that did not change: it
                 -- was counted in that group when it settled, so the
                 -- bounds are the same.
                 SELECT date_trunc('minute', n.settled_at) AS minute, n.tenant_id, w.outcome, w.lag, 1 AS sign
                   FROM owed_new n
                  CROSS JOIN LATERAL owed_ledger_minutes_words(n.state, n.delivered_at, n.due_at, n.receipt_status) w
                  WHERE n.settled_at IS NOT NULL
                 UNION ALL
                 SELECT date_trunc('minute', o.settled_at), o.tenant_id, w.outcome, w.lag, -1
                   FROM owed_old o
                  CROSS JOIN LATERAL owed_ledger_minutes_words(o.state, o.delivered_at, o.due_at, o.receipt_status) w
                  WHERE o.settled_at IS NOT NULL
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
                  WHERE a.outcome = 'accepted' AND a.attempt > 1
                    AND EXISTS (SELECT FROM owed_notification_attempts p
                                 WHERE p.notification_id = a.notification_id AND p.attempt < a.attempt
                                   AND p.outcome = 'accepted')) x
              GROUP BY 1, 2, 3) c;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_counters_add(p_minute timestamptz[], p_tenant text[], p_outcome text[],
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_minutes_uncount(p_ids bigint[], p_attempt_rows bigint[], p_attempt_ids bigint[])
RETURNS void
LANGUAGE sql SET search_path = pg_catalog, public AS $$
SELECT owed_ledger_counters_add(array_agg(c.minute), array_agg(c.tenant_id), array_agg(c.outcome),
                                array_agg(c.bucket), array_agg(c.settled), array_agg(NULL::double precision),
                                array_agg(NULL::double precision))
  FROM (SELECT d.minute, d.tenant_id, d.outcome, d.bucket, -sum(d.n)::bigint AS settled
          FROM (SELECT date_trunc('minute', r.settled_at) AS minute, r.tenant_id, w.outcome,
                       owed_lag_bucket(w.lag) AS bucket, count(*) AS n
                  FROM owed_notifications r
                 CROSS JOIN LATERAL owed_ledger_minutes_words(r.state, r.delivered_at, r.due_at, r.receipt_status) w
                 WHERE r.id = ANY (p_ids) AND r.settled_at IS NOT NULL
                 GROUP BY 1, 2, 3, 4
                UNION ALL
                SELECT date_trunc('minute', a.finished_at), a.tenant_id, x.outcome, -1::smallint, count(*)
                  FROM unnest(p_attempt_rows, p_attempt_ids) AS u(notification_id, id)
                  JOIN owed_notification_attempts a ON a.notification_id = u.notification_id AND a.id = u.id
                 CROSS JOIN LATERAL (
                    SELECT 'possible_duplicate' AS outcome WHERE a.possible_duplicate
                    UNION ALL
                    SELECT 'accepted_again'
                     WHERE a.outcome = 'accepted'
                       AND EXISTS (SELECT FROM owed_notification_attempts p
                                    WHERE p.notification_id = a.notification_id AND p.attempt < a.attempt
                                      AND p.outcome = 'accepted')) x
                 GROUP BY 1, 2, 3, 4) d
         GROUP BY 1, 2, 3, 4) c
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
REVOKE owed_definer FROM CURRENT_USER;
