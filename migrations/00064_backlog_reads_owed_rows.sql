-- The backlog (owed_ledger_backlog: /metrics on every scrape, owedctl
-- stats, the console) reads the owed rows through their index whatever
-- their share of the ledger: with the owed rows half the table the planner
-- read all of it. Its statement moves to owed_ledger_backlog_owed, which
-- runs with enable_seqscan off (internal/ledger/sql/operator.sql), and the
-- history's per-minute sample reads it too, and runs with enable_seqscan
-- off as well (owed_history_sample, internal/ledger/sql/history.sql): its
-- join of a minute's attempts to their rows read the whole ledger at a
-- million rows. Expand-only: both functions keep their signatures and
-- their answers.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION owed_ledger_backlog_owed(p_now timestamptz)
RETURNS TABLE (state text, owed bigint, oldest_due_at timestamptz, asked_at timestamptz)
LANGUAGE sql STABLE SET enable_seqscan = off AS $$
SELECT state, count(*), min(due_at) FILTER (WHERE due_at <= coalesce($1, now())), coalesce($1, now())
  FROM owed_notifications WHERE settled_at IS NULL GROUP BY state
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_ledger_backlog_owed(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_backlog_owed(timestamptz) TO owed_definer;
-- +goose StatementBegin
CREATE FUNCTION owed_history_sample(p_now timestamptz, p_dead_letters bigint, p_keep_s double precision)
RETURNS bigint
LANGUAGE sql SET enable_seqscan = off AS $$
WITH t AS (
    SELECT coalesce($1, now()) AS now, date_trunc('minute', coalesce($1, now())) AS minute
), forget AS (
    DELETE FROM owed_history h USING t WHERE h.minute < t.minute - make_interval(secs => $3)
), owed AS (
    SELECT b.state, b.owed AS n, b.oldest_due_at AS oldest FROM t, owed_ledger_backlog_owed(t.now) b
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
    SELECT m.minute, 'limited', m.account, m.responses
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
REVOKE EXECUTE ON FUNCTION owed_history_sample(timestamptz, bigint, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_history_sample(timestamptz, bigint, double precision) TO owed_definer;
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_backlog(p_now timestamptz)
RETURNS TABLE (state text, owed bigint, oldest_due_at timestamptz, asked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT * FROM owed_ledger_backlog_owed($1)
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_history_record(p_now timestamptz, p_dead_letters bigint, p_keep_s double precision)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT owed_history_sample($1, $2, $3)
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_backlog(p_now timestamptz)
RETURNS TABLE (state text, owed bigint, oldest_due_at timestamptz, asked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT state, count(*), min(due_at) FILTER (WHERE due_at <= coalesce($1, now())), coalesce($1, now())
  FROM owed_notifications WHERE settled_at IS NULL GROUP BY state
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_history_record(p_now timestamptz, p_dead_letters bigint, p_keep_s double precision)
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
    SELECT m.minute, 'limited', m.account, m.responses
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
REVOKE owed_definer FROM CURRENT_USER;
DROP FUNCTION owed_history_sample(timestamptz, bigint, double precision);
DROP FUNCTION owed_ledger_backlog_owed(timestamptz);
