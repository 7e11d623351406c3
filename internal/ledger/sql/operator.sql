-- What operators read across tenants (owedctl stats, the console's
-- dashboard, a dead letter's row), and the audit trail of what they did.
-- Each read is a SECURITY DEFINER function owned by owed_definer that
-- returns aggregates or ids, never a recipient or a payload; the runtime
-- role may EXECUTE them and read nothing wider.

-- owed_ledger_backlog_owed is owed_ledger_backlog's read: the owed rows
-- through owed_notifications_owed_due, whatever their share of the table.
-- Where the owed rows were half the ledger (a backlog of 100,000 beside
-- 100,000 settled), the planner read the whole table instead, which then
-- costs about what the index does but grows with every row settled after
-- it, and /metrics reads the backlog on every scrape. enable_seqscan off
-- leaves the planner the index alone
-- (TestBacklogReadsTheOwedRowsAtAnyShare). A function of its own, since a
-- definer function carries its pinned search_path and nothing else
-- (internal/security).
CREATE FUNCTION owed_ledger_backlog_owed(p_now timestamptz)
RETURNS TABLE (state text, owed bigint, oldest_due_at timestamptz, asked_at timestamptz)
LANGUAGE sql STABLE SET enable_seqscan = off AS $$
SELECT state, count(*), min(due_at) FILTER (WHERE due_at <= coalesce($1, now())), coalesce($1, now())
  FROM owed_notifications WHERE settled_at IS NULL GROUP BY state
$$;
REVOKE EXECUTE ON FUNCTION owed_ledger_backlog_owed(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_backlog_owed(timestamptz) TO owed_definer;

-- owed_ledger_backlog counts what is owed by state, with the oldest due
-- time among the rows already due, as of p_now (NULL: the database's clock),
-- reading the owed rows' index (owed_ledger_backlog_owed, above).
CREATE FUNCTION owed_ledger_backlog(p_now timestamptz)
RETURNS TABLE (state text, owed bigint, oldest_due_at timestamptz, asked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT * FROM owed_ledger_backlog_owed($1)
$$;
ALTER FUNCTION owed_ledger_backlog(timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_ledger_backlog(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_backlog(timestamptz) TO owed_runtime;

-- owed_ledger_stats summarises the rows settled since p_since: how many of
-- each final state, the delivery lag (delivered_at - due_at) at p50, p95
-- and max, and from the attempts finished since then, the rows accepted
-- more than once and the sends flagged possible duplicates. A window of an
-- hour or less is read from the rows (owed_ledger_stats_rows); a longer one
-- from the per-minute counters (owed_ledger_stats_minutes, minutes.sql),
-- whose counts and maximum are exact and whose percentiles are as precise
-- as one lag bucket. The hour has a few minutes' margin: a caller asks for
-- the last hour by its own clock, which may run behind the database's.
CREATE FUNCTION owed_ledger_stats(p_since timestamptz)
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
ALTER FUNCTION owed_ledger_stats(timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_ledger_stats(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_stats(timestamptz) TO owed_runtime;

-- owed_ledger_stats_rows is owed_ledger_stats read from the rows settled
-- since p_since (owed_notifications_settled): exact percentiles, at the
-- cost of the window's rows. It runs with enable_seqscan off: planned
-- without p_since's value, it expects a third of each table past any
-- time, so on the partitioned ledger a month partition of the rows or
-- the attempts, settled long before the window, may be read whole
-- (bench/ledgerscale counted two to five sequential scans of ledger
-- tables a stats call at 1 million rows over twelve months).
CREATE FUNCTION owed_ledger_stats_rows(p_since timestamptz)
RETURNS TABLE (delivered bigint, expired bigint, failed bigint, skipped bigint, cancelled bigint,
               lag_p50 double precision, lag_p95 double precision, lag_max double precision,
               duplicate_rows bigint, possible_duplicates bigint)
LANGUAGE sql STABLE SET enable_seqscan = off AS $$
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
REVOKE EXECUTE ON FUNCTION owed_ledger_stats_rows(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_stats_rows(timestamptz) TO owed_definer;

-- owed_ledger_stats_minutes is owed_ledger_stats read from the counters
-- (minutes.sql): owed_ledger_hours for every whole hour they hold after
-- p_since, owed_ledger_minutes for the whole minutes before the first of
-- those hours, and the rows and attempts for the rest: the
-- part of p_since's minute after it, and what settled or finished before
-- the counters began (owed_ledger_minutes_from). The state counts, the
-- maximum lag and the possible duplicates are exact. A percentile is
-- placed in its lag bucket by the buckets' counts, then between the
-- bucket's smallest and largest lag by its rank in the bucket: it lies in
-- the bucket of the exact percentile_cont (or between two neighbouring
-- buckets' values, when the exact one does), so it is off by less than the
-- bucket's width, 19% of the lag, and exact when the bucket's lags are all
-- equal. The rows accepted more than once are counted as the accepted
-- sends of a row accepted before (accepted_again): the same number when
-- each such row was accepted twice within the window, one more for each
-- further acceptance, and one for a row whose first acceptance was before
-- the window.
-- The edges are scalar subqueries of owed_ledger_minutes_from (one row,
-- never analyzed, which the planner would otherwise guess at 1,540) and
-- the minutes are bounded by p_since's minute as well as by the edges (which
-- the planner cannot know), so the read is planned at its real size, not
-- millions of rows, and Postgres does not JIT-compile it: 1.3 s of a 1.5 s
-- day's read on bench/ledgerscale's 20M ledger (TestLongStatsAreNotCompiled).
CREATE FUNCTION owed_ledger_stats_minutes(p_since timestamptz)
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
REVOKE EXECUTE ON FUNCTION owed_ledger_stats_minutes(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_stats_minutes(timestamptz) TO owed_definer;

-- owed_ledger_tenants_of says whose rows the ids are, and nothing else: an
-- operator names rows by id alone (owedctl notifications get, a dead
-- letter's row), and the row is then read, or redriven, in that tenant's
-- own scope.
CREATE FUNCTION owed_ledger_tenants_of(p_ids bigint[]) RETURNS TABLE (id bigint, tenant_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT n.id, n.tenant_id FROM owed_notifications n WHERE n.id = ANY($1)
$$;
ALTER FUNCTION owed_ledger_tenants_of(bigint[]) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_ledger_tenants_of(bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_tenants_of(bigint[]) TO owed_runtime;

-- owed_ledger_sends_per_minute_rows is owed_ledger_sends_per_minute's
-- read of the attempts finished since p_since. PL/pgSQL, so the read is
-- planned with p_since's value (a LANGUAGE sql function that is not
-- inlined plans its statement without its parameters' values, and for
-- finished_at >= $1 the planner then guesses a third of the attempts: at
-- 20 million attempts, bench/ledgerscale, that guess chose a parallel
-- sequential scan of the whole table, 1.6 s a call for an hour's few
-- thousand attempts). It runs with enable_seqscan off: early in a month
-- its partition of the attempts holds little but the window, and the
-- planner, given the value, read that partition whole, a read that grows
-- with the month after it
-- (TestReadsOfAWindowReadTheIndexWhenTheWindowIsTheWholeMonth). A function
-- of its own, since a definer carries its pinned search_path and nothing
-- else (internal/security).
CREATE FUNCTION owed_ledger_sends_per_minute_rows(p_since timestamptz)
RETURNS TABLE (minute timestamptz, accepted bigint, other bigint)
LANGUAGE plpgsql STABLE SET enable_seqscan = off AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT date_trunc('minute', finished_at), count(*) FILTER (WHERE outcome = 'accepted'),
           count(*) FILTER (WHERE outcome <> 'accepted')
      FROM owed_notification_attempts
     WHERE finished_at >= $1
     GROUP BY 1 ORDER BY 1;
END
$$;
REVOKE EXECUTE ON FUNCTION owed_ledger_sends_per_minute_rows(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_sends_per_minute_rows(timestamptz) TO owed_definer;

-- owed_ledger_sends_per_minute counts, across every tenant, the send
-- attempts finished in each minute since p_since: accepted, and the rest
-- (skipped, transient, permanent). The console charts the last hour. The
-- read is owed_ledger_sends_per_minute_rows, above.
CREATE FUNCTION owed_ledger_sends_per_minute(p_since timestamptz)
RETURNS TABLE (minute timestamptz, accepted bigint, other bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM owed_ledger_sends_per_minute_rows(p_since);
END
$$;
ALTER FUNCTION owed_ledger_sends_per_minute(timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_ledger_sends_per_minute(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_sends_per_minute(timestamptz) TO owed_runtime;

-- The operators' audit trail (internal/console, internal/ops): one row per
-- operator action (a dead-letter redrive or delete, a hold, a pause or
-- its resume, a token created or revoked, reading a tenant's payload,
-- binding an owed_apps login) with who, what, the filter
-- or ids it named, how many things it touched and the reason given. It is
-- not a tenant's data, so it has no row-level security.
--
-- operator is the name the operator's tool says (the console's signed-in
-- operator, owedctl's --operator or OS user); login is the database login
-- that wrote the line, recorded by the database itself (session_user), so
-- a line can only claim an operator through a login the trail names. NULL
-- for the lines written before the database recorded it.
CREATE TABLE owed_operator_audit (
    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL,
    operator text        NOT NULL CHECK (operator <> '' AND octet_length(operator) <= 256),
    action   text        NOT NULL CHECK (action <> '' AND octet_length(action) <= 64),
    target   text        NOT NULL CHECK (octet_length(target) <= 4096),
    count    integer     NOT NULL CHECK (count >= 0),
    reason   text        NOT NULL CHECK (octet_length(reason) <= 1024),
    login    text        CHECK (octet_length(login) <= 64)
);
CREATE INDEX owed_operator_audit_at ON owed_operator_audit (at);

-- The runtime role reads the trail; an operator login appends to it only
-- through owed_operator_audit_record: no operator action edits or removes
-- what an earlier one recorded, and the services' login writes no line.
GRANT SELECT ON owed_operator_audit TO owed_runtime;
GRANT SELECT, INSERT ON owed_operator_audit TO owed_definer;

-- owed_operator_audit_record appends one line naming the login that wrote
-- it. An operator login may record any action; the token administrator
-- only its own token actions (token_*), so it cannot forge a line of an
-- operator's hold, pause or dead-letter delete.
CREATE FUNCTION owed_operator_audit_record(p_now timestamptz, p_operator text, p_action text, p_target text,
                                           p_count integer, p_reason text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_id bigint;
BEGIN
    IF NOT pg_has_role(session_user, 'owed_operator', 'MEMBER') AND p_action NOT LIKE 'token\_%' THEN
        RAISE EXCEPTION 'permission denied to record the operator action %: login % may record only token actions',
            p_action, session_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
    VALUES (coalesce(p_now, now()), p_operator, p_action, p_target, p_count, p_reason, session_user)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;
ALTER FUNCTION owed_operator_audit_record(timestamptz, text, text, text, integer, text) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_operator_audit_record(timestamptz, text, text, text, integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_operator_audit_record(timestamptz, text, text, text, integer, text) TO owed_operator;
-- The token administrator writes its line beside each token it creates or
-- revokes, in the same transaction (internal/api, tokens.go).
GRANT EXECUTE ON FUNCTION owed_operator_audit_record(timestamptz, text, text, text, integer, text) TO owed_token_admin;
