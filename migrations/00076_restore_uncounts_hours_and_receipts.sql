-- owedctl archive restore takes off the counters what its own inserts
-- counted (owed_ledger_minutes_uncount, internal/ledger/sql/minutes.sql).
-- The counters now also keep the hours and a delivered row's receipt word,
-- both added by owed_ledger_counters_add, so the restore takes its rows off
-- through that function too: before, it took them off the minutes alone
-- and left a restored month counted twice in the hours and the receipts.

-- +goose Up
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_minutes_uncount(p_ids bigint[], p_attempt_rows bigint[], p_attempt_ids bigint[])
RETURNS void
LANGUAGE sql SET search_path = pg_catalog, public AS $$
INSERT INTO owed_ledger_minutes AS m (minute, tenant_id, outcome, bucket, slot, settled)
SELECT d.minute, d.tenant_id, d.outcome, d.bucket, 0, -sum(d.n)
  FROM (SELECT date_trunc('minute', r.settled_at) AS minute, r.tenant_id, r.state AS outcome,
               owed_lag_bucket(CASE WHEN r.state = 'delivered'
                                    THEN extract(epoch FROM r.delivered_at - r.due_at)::double precision END) AS bucket,
               count(*) AS n
          FROM owed_notifications r
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
 GROUP BY 1, 2, 3, 4
 ORDER BY 1, 2, 3, 4
ON CONFLICT (minute, tenant_id, outcome, bucket, slot) DO UPDATE SET settled = m.settled + EXCLUDED.settled
$$;
-- +goose StatementEnd
