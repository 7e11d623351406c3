-- How many 429s each provider account got in a minute, not only that it got
-- one: owed_provider_limited_minutes.responses, counted by owed_pace_pause
-- and owed_pace_record_limited_minute, and owed_history_record's `limited`
-- series reads it, so the console charts 429s per minute per account
-- (internal/pace/sql/pace.sql, internal/ledger/sql/history.sql).
-- Expand-only: the previous release calls the same functions with the same
-- arguments, and a row it writes counts one.

-- +goose Up
ALTER TABLE owed_provider_limited_minutes ADD COLUMN responses integer NOT NULL DEFAULT 1 CHECK (responses >= 1);
GRANT UPDATE (responses) ON owed_provider_limited_minutes TO owed_definer;
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_pace_pause(p_account text, p_pause bigint, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH limited AS (
    INSERT INTO owed_provider_limited_minutes AS m (account, minute)
    VALUES ($1, date_trunc('minute', coalesce($3, clock_timestamp())))
    ON CONFLICT (account, minute) DO UPDATE SET responses = m.responses + 1
), until AS (
    SELECT coalesce($3, clock_timestamp()) + (least(greatest($2, 0), 3600000000) * interval '1 microsecond') AS at
)
INSERT INTO owed_provider_pace AS p (account, tat, paused_until, updated_at)
SELECT $1, u.at, u.at, coalesce($3, clock_timestamp()) FROM until u
ON CONFLICT (account) DO UPDATE
   SET paused_until = greatest(p.paused_until, excluded.paused_until),
       tat = greatest(p.tat, excluded.tat),
       updated_at = excluded.updated_at
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_pace_record_limited_minute(p_account text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_provider_limited_minutes AS m (account, minute)
VALUES ($1, date_trunc('minute', coalesce($2, clock_timestamp())))
ON CONFLICT (account, minute) DO UPDATE SET responses = m.responses + 1
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

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_pace_pause(p_account text, p_pause bigint, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH limited AS (
    INSERT INTO owed_provider_limited_minutes (account, minute)
    VALUES ($1, date_trunc('minute', coalesce($3, clock_timestamp())))
    ON CONFLICT DO NOTHING
), until AS (
    SELECT coalesce($3, clock_timestamp()) + (least(greatest($2, 0), 3600000000) * interval '1 microsecond') AS at
)
INSERT INTO owed_provider_pace AS p (account, tat, paused_until, updated_at)
SELECT $1, u.at, u.at, coalesce($3, clock_timestamp()) FROM until u
ON CONFLICT (account) DO UPDATE
   SET paused_until = greatest(p.paused_until, excluded.paused_until),
       tat = greatest(p.tat, excluded.tat),
       updated_at = excluded.updated_at
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_pace_record_limited_minute(p_account text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_provider_limited_minutes (account, minute)
VALUES ($1, date_trunc('minute', coalesce($2, clock_timestamp())))
ON CONFLICT DO NOTHING
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
REVOKE owed_definer FROM CURRENT_USER;
REVOKE UPDATE (responses) ON owed_provider_limited_minutes FROM owed_definer;
ALTER TABLE owed_provider_limited_minutes DROP COLUMN responses;
