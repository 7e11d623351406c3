-- The operators' history: one sample a minute of the backlog by state, the
-- oldest owed age, the delivery lag at p50 and p95, the dead-letter depth,
-- and each provider account's sends and 429 minutes, which the sweeper
-- records on its minute cron and the console charts over the last hour and
-- day (owed_history, owed_history_record: internal/ledger/sql/history.sql).
-- Expand-only: a release that does not record or read it ignores it.

-- +goose Up
CREATE TABLE owed_history (
    minute timestamptz      NOT NULL,
    series text             NOT NULL CHECK (series <> '' AND octet_length(series) <= 64),
    label  text             NOT NULL CHECK (octet_length(label) <= 256),
    value  double precision NOT NULL,
    PRIMARY KEY (minute, series, label)
);
GRANT SELECT ON owed_history TO owed_runtime;
GRANT SELECT, INSERT, DELETE ON owed_history TO owed_definer;

-- +goose StatementBegin
CREATE FUNCTION owed_history_record(p_now timestamptz, p_dead_letters bigint, p_keep_s double precision)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH t AS (
    SELECT coalesce($1, now()) AS now, date_trunc('minute', coalesce($1, now())) AS minute
), forget AS (
    DELETE FROM owed_history h USING t WHERE h.minute < t.minute - make_interval(secs => $3)
), owed AS (
    SELECT n.state, count(*) AS n, min(n.due_at) FILTER (WHERE n.due_at <= t.now) AS oldest
      FROM owed_notifications n, t WHERE n.settled_at IS NULL GROUP BY n.state
), sent AS (
    SELECT a.provider, n.state, n.delivered_at - n.due_at AS lag
      FROM t, owed_notification_attempts a JOIN owed_notifications n ON n.id = a.notification_id
     WHERE a.finished_at >= t.minute - interval '1 minute' AND a.finished_at < t.minute AND a.outcome = 'accepted'
), sample (minute, series, label, value) AS (
    SELECT t.minute, 'backlog', s.state, coalesce(o.n, 0)
      FROM t, (VALUES ('pending'), ('leased'), ('queued'), ('sending')) s (state) LEFT JOIN owed o ON o.state = s.state
    UNION ALL
    SELECT t.minute, 'oldest_owed_age_s', '', coalesce(greatest(extract(epoch FROM t.now - min(o.oldest)), 0), 0)
      FROM t LEFT JOIN owed o ON true GROUP BY t.minute, t.now
    UNION ALL
    SELECT t.minute, 'dead_letters', '', $2 FROM t WHERE $2 IS NOT NULL
    UNION ALL
    SELECT t.minute - interval '1 minute', 'sends', s.provider, count(*) FROM t, sent s GROUP BY 1, 3
    UNION ALL
    SELECT t.minute - interval '1 minute', q.series, '', q.value
      FROM t, (SELECT 'lag_p50_s' AS series, percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.lag)) AS value
                 FROM sent s WHERE s.state = 'delivered'
               UNION ALL
               SELECT 'lag_p95_s', percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM s.lag))
                 FROM sent s WHERE s.state = 'delivered') q
     WHERE q.value IS NOT NULL
    UNION ALL
    SELECT m.minute, 'limited', m.account, 1
      FROM t, owed_provider_limited_minutes m WHERE m.minute = t.minute - interval '1 minute'
), written AS (
    INSERT INTO owed_history (minute, series, label, value)
    SELECT minute, series, label, value FROM sample
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM written
$$;
-- +goose StatementEnd

CALL owed_definer_takes_functions(ARRAY['owed_history_record']);

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
DROP FUNCTION owed_history_record(timestamptz, bigint, double precision);
REVOKE owed_definer FROM CURRENT_USER;
DROP TABLE owed_history;
