-- Per-minute counters of the settled rows, so a long stats window
-- (owedctl stats --since 24h, owed_ledger_stats in operator.sql) costs what
-- an hour does: at 10 million a day a day's window read 10 million entries
-- of owed_notifications_settled and sorted their lags for the
-- percentiles, and the day's attempts for the duplicate counts; from the
-- counters it reads one row per hour, outcome and lag bucket that had one
-- (owed_ledger_hours, below), and the minutes' rows before its first whole
-- hour.
--
-- One row per (minute, tenant, outcome, lag bucket, slot). An outcome is
-- a final state (delivered, expired, failed, skipped, cancelled): how many
-- rows settled in it in that minute (by settled_at), and for delivered
-- rows the smallest and largest lag (delivered_at - due_at, in seconds,
-- as owed_ledger_stats measures it) among the rows of the bucket. Or it
-- is an attempt's, by the minute it finished: possible_duplicate (a send
-- flagged a possible duplicate) and accepted_again (an accepted send of a
-- row the provider had accepted before). Or it is a receipt's word on a
-- row settled delivered, by the minute the row settled:
-- receipt_delivered, receipt_bounced, receipt_failed (the row's
-- receipt_status, a provider's final word; owed_ledger_receipt_stats,
-- receipts.sql). A receipt moves a row's counter from one word to another
-- as it moves receipt_status. The
-- buckets are fixed (owed_lag_bucket): a lag's bucket is known without
-- reading any other row, so percentiles come from the buckets' counts and
-- are as precise as one bucket (a quarter of a power of two, 19%). A
-- bucket is -1 for an outcome other than delivered.
--
-- slot spreads the writes of concurrent transactions over eight rows of
-- each key (the writing backend's pid modulo eight): every settle of one
-- tenant in one minute adds to the same counters, and a transaction holds
-- the counter row it updated until it commits, so without slots the
-- workers settling one tenant's rows would queue behind each other's
-- commits. A reader sums the slots.
--
-- settled may be negative in a row: a settled row that leaves its state
-- (an operator's redrive of a failed row) is taken off its minute by the
-- statement that moves it, in the slot of that statement's backend.
--
-- The table holds aggregates, never a row of a tenant's ledger, so it has
-- no row-level security; only the definer reads and writes it.
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

-- owed_ledger_hours is owed_ledger_minutes summed by hour across tenants,
-- kept by the same statements: a window's whole hours are read here.
-- The operators' stats are across tenants, and a minute's counters are
-- one row per tenant that settled a row in it, so a day's window read
-- from the minutes cost up to 1,440 × tenants × words rows, as many
-- more as the ledger was denser (at 20 million rows over a year, 14
-- times the rows of 1 million: bench/ledgerscale); an hour here is one row
-- per word, bucket and slot, however many tenants and rows it counts.
-- What the slots cost: every tenant's settles in an hour add to the same
-- eight rows of each word, as one tenant's settles in a minute do to its
-- minute's; a transaction holds the row from its statement to its commit.
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

-- owed_ledger_minutes_from is the first minute the counters hold whole:
-- the minute after the counting began on a ledger that already held rows
-- (its rows settled before then were never counted, and the stats read
-- them from the ledger), or -infinity on a ledger that began empty. One
-- row. receipts is the same for the receipts' words (receipt_*), which
-- were counted later than the rest: a window reaching before it reads the
-- receipt words of the rows. hours is the first hour owed_ledger_hours
-- holds whole, which began later too: a window reads the minutes before
-- it.
CREATE TABLE owed_ledger_minutes_from (
    one      boolean     PRIMARY KEY DEFAULT true CHECK (one),
    minute   timestamptz NOT NULL,
    receipts timestamptz NOT NULL,
    hours    timestamptz NOT NULL
);
GRANT SELECT ON owed_ledger_minutes_from TO owed_definer;
INSERT INTO owed_ledger_minutes_from (minute, receipts, hours)
SELECT m, m, m
  FROM (SELECT CASE WHEN EXISTS (SELECT FROM owed_notifications)
                    THEN date_trunc('minute', now()) + interval '1 minute' ELSE '-infinity' END) x (m);

-- owed_lag_bucket is the counters' bucket of a delivered row's lag in
-- seconds: 0 below a millisecond (a row sent on time or ahead of its due
-- time), then k for a lag of [2^((k-1)/4), 2^(k/4)) milliseconds, so each
-- bucket is 19% wider than the one before; -1 for no lag (a row not
-- delivered).
CREATE FUNCTION owed_lag_bucket(p_lag double precision) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN p_lag IS NULL THEN -1
            WHEN p_lag < 0.001 THEN 0
            ELSE least(floor(4 * ln(p_lag * 1000) / ln(2)) + 1, 32767) END::smallint
$$;

-- owed_ledger_minutes_words are the counters a settled row counts in: its
-- final state, with its lag when it was delivered, and for a delivered row
-- a provider's final word on it (receipt_delivered, receipt_bounced,
-- receipt_failed), when it has one. One function, so the rows an insert
-- adds and those an update adds and takes off are counted alike.
CREATE FUNCTION owed_ledger_minutes_words(p_state text, p_delivered_at timestamptz, p_due_at timestamptz,
                                          p_receipt_status text)
RETURNS TABLE (outcome text, lag double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT p_state, CASE WHEN p_state = 'delivered' THEN extract(epoch FROM p_delivered_at - p_due_at)::double precision END
UNION ALL
SELECT 'receipt_' || p_receipt_status, NULL
 WHERE p_state = 'delivered' AND p_receipt_status IN ('delivered', 'bounced', 'failed')
$$;

-- owed_ledger_counters_add adds a statement's counts to the counters: one
-- element of the arrays per minute, tenant, word and bucket (settled may
-- be negative: rows taken off), to owed_ledger_minutes, then summed by
-- hour to owed_ledger_hours, each in one upsert in key order and the
-- minutes first (the hours' upsert reads the minutes' count), so two
-- statements never wait on each other's counters in opposite orders. The
-- slot is the writing backend's (pid modulo eight). Nothing to count (the
-- triggers' aggregates over no row: NULL arrays) returns at once. It is
-- PL/pgSQL so its upserts are planned once per session: the body of an SQL
-- function not inlined is planned again at every call (about 0.2 ms, twice
-- a settle).
CREATE FUNCTION owed_ledger_counters_add(p_minute timestamptz[], p_tenant text[], p_outcome text[],
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
REVOKE EXECUTE ON FUNCTION owed_ledger_counters_add(timestamptz[], text[], text[], smallint[], bigint[],
                                                    double precision[], double precision[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_counters_add(timestamptz[], text[], text[], smallint[], bigint[],
                                                   double precision[], double precision[]) TO owed_definer;

-- owed_ledger_minutes_count keeps the counters from the rows a statement
-- on owed_notifications settled (a statement trigger, whatever the
-- statement: the worker's settle, the sweep's expiry, a cancel, an
-- application's SQL, a restore), in one call of owed_ledger_counters_add
-- per statement: a counter per minute, tenant, word and bucket the
-- statement touched, never one per ledger row. An update counts a row whose settlement changed (settled_at,
-- state, its tenant, its lag or its receipt's word), taking the old one
-- off and adding the new; every other update (a lease, a claim, an
-- interim receipt) writes nothing.
CREATE FUNCTION owed_ledger_minutes_count() RETURNS trigger
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
ALTER FUNCTION owed_ledger_minutes_count() OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_ledger_minutes_count() FROM PUBLIC;
-- As every definer function the migrations hand to owed_definer
-- (owed_definer_takes_functions); a trigger function cannot be called
-- but as its trigger.
GRANT EXECUTE ON FUNCTION owed_ledger_minutes_count() TO owed_runtime;

-- A trigger with transition tables serves one event, so inserts (a row
-- scheduled already past its grace is inserted expired; a restore inserts
-- settled rows) and updates have one each.
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

-- owed_ledger_minutes_attempts keeps the attempts' counters
-- (possible_duplicate, accepted_again) from the attempts a statement
-- inserted, in one call of owed_ledger_counters_add per statement, as
-- owed_ledger_minutes_count does for the rows. Attempts are written once, finished, and never change what
-- is counted. An accepted send is accepted_again when the row has an
-- accepted attempt of a lower number: one probe of
-- owed_notification_attempts_notification per accepted send after the
-- first attempt (a first attempt has none before it, and the probe is one
-- per month partition of the attempts).
CREATE FUNCTION owed_ledger_minutes_attempts() RETURNS trigger
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
ALTER FUNCTION owed_ledger_minutes_attempts() OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_ledger_minutes_attempts() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_minutes_attempts() TO owed_runtime;

CREATE TRIGGER owed_ledger_minutes_attempted
    AFTER INSERT ON owed_notification_attempts
    REFERENCING NEW TABLE AS owed_new
    FOR EACH STATEMENT
    EXECUTE FUNCTION owed_ledger_minutes_attempts();

-- owed_ledger_minutes_uncount takes off the counters what the counters'
-- triggers added for the rows p_ids and the attempts (p_attempt_rows,
-- p_attempt_ids: their row's id and their own, pairwise) that a restore
-- of an archive (`owedctl archive restore`, internal/archive) has just
-- inserted, in its transaction: the counters are the record of what
-- settled, which retention leaves when it drops a month (as the archive
-- outlives the rows), so a month restored must not be counted a second
-- time. The rows and attempts are counted as owed_ledger_minutes_count and
-- owed_ledger_minutes_attempts counted them; a row the restore found there
-- already was not inserted, not counted, and is not named here. It takes
-- off what the triggers add, through the same owed_ledger_counters_add:
-- the minutes and the hours, a delivered row's receipt word with its
-- state. The lag bounds of a bucket (lag_min, lag_max) stay as they were.
CREATE FUNCTION owed_ledger_minutes_uncount(p_ids bigint[], p_attempt_rows bigint[], p_attempt_ids bigint[])
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
REVOKE EXECUTE ON FUNCTION owed_ledger_minutes_uncount(bigint[], bigint[], bigint[]) FROM PUBLIC;
