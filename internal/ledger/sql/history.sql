-- The operators' history (internal/ledger/history.go): one sample a minute
-- of what on-call looks at first, so the console charts the last hour and
-- day without Prometheus. The sweeper records it on its minute cron
-- (owed_history_record); the console reads it. It holds aggregates only,
-- never a tenant's row, so it has no row-level security.
--
-- One row per minute, series and label: series is backlog (label: the
-- state), oldest_owed_age_s, lag_p50_s, lag_p95_s, dead_letters, sends
-- (label: the provider account) or limited (label: the account; how many
-- of its sends got a 429 in that minute). A series is absent for a minute
-- with nothing to say (no delivery, no 429, the queue's depth unknown).
CREATE TABLE owed_history (
    minute timestamptz      NOT NULL,
    series text             NOT NULL CHECK (series <> '' AND octet_length(series) <= 64),
    label  text             NOT NULL CHECK (octet_length(label) <= 256),
    value  double precision NOT NULL,
    PRIMARY KEY (minute, series, label)
);
GRANT SELECT ON owed_history TO owed_runtime;
GRANT SELECT, INSERT, DELETE ON owed_history TO owed_definer;

-- owed_history_sample is owed_history_record's statement (below, with
-- what it reads). It runs with enable_seqscan off, so each of its reads is
-- an index whatever the planner guesses: a function's statement is planned
-- without its parameters' values (the minute it reads is a guess), and at
-- a million settled rows the sample read a ledger table sequentially once
-- per call (bench/ledgerscale's count of each statement; none since). A
-- function of its own, since a definer function carries its pinned
-- search_path and nothing else (internal/security).
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
REVOKE EXECUTE ON FUNCTION owed_history_sample(timestamptz, bigint, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_history_sample(timestamptz, bigint, double precision) TO owed_definer;

-- owed_history_record samples the minute of p_now (NULL: the database's
-- clock) across every tenant and forgets the samples older than p_keep_s
-- seconds; it answers how many rows it wrote. The backlog, its oldest due
-- age and the dead-letter depth (p_dead_letters, the queue's, NULL when it
-- could not be asked) are as of now, under the current minute; the sends,
-- the lag of the rows delivered (delivered_at - due_at, as
-- owed_ledger_stats) and the 429s are of the whole minute before, under
-- that minute. A minute already sampled (another replica, another cron
-- call) keeps its first sample. The backlog is owed_ledger_backlog's read
-- (owed_ledger_backlog_owed: the owed rows' index, whatever their share of
-- the ledger); the rest read the attempts finished in one minute
-- (owed_notification_attempts_finished) and one minute's 429 marks.
CREATE FUNCTION owed_history_record(p_now timestamptz, p_dead_letters bigint, p_keep_s double precision)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT owed_history_sample($1, $2, $3)
$$;
ALTER FUNCTION owed_history_record(timestamptz, bigint, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_history_record(timestamptz, bigint, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_history_record(timestamptz, bigint, double precision) TO owed_runtime;
