-- The sweep: the sweeper's statements over every tenant's owed rows. The
-- sweep leases the rows falling due (pending to leased), publishes a queue
-- message for each, marks the published rows queued, releases what it
-- could not publish, republishes rows whose message was lost (their lease
-- ran out), and expires rows past their expiry. internal/ledger is the only
-- caller, and its calls in queries.sql explain each condition.
--
-- Each statement is a SECURITY DEFINER function owned by owed_definer, and
-- the runtime role may EXECUTE exactly these: each returns only the columns
-- its caller reads (the lease: a row's id, tenant, due time and
-- generation, never its recipient or payload), and search_path is pinned,
-- pg_temp last, so a caller cannot put its own objects, temporary tables
-- included, in front of the tables (roles.sql says why pg_temp is named). Parameters
-- named p_now are the injected clock (NULL: the database's); durations are
-- in seconds.

-- owed_sweep_lease_sql is the text of the lease, in three slices:
--   1  pending rows due by the publish-ahead horizon, after a (due_at, id)
--      cursor, oldest first;
--   2  rows leased, queued or sending whose lease ran out (a lost message,
--      a dead worker), oldest first;
--   other  both at once.
-- It sets each row leased until now + $2 and adds one to the row's queue
-- generation when the row was published before (a republish). One text
-- serves owed_sweep_lease, which runs it, owed_sweep_explain_lease, which
-- runs it under EXPLAIN ANALYZE (its caller rolls back), and
-- owed_sweep_lease_due, so the plan an operator reads is the plan of the
-- statement the sweep runs. Parameters: $1 now (NULL: the database's), $2
-- the lease and $3 the publish-ahead window in seconds, $4 the limit, $5
-- and $6 the pending slice's (due_at, id) cursor. It is the definer's
-- own: the runtime role cannot run it.
CREATE FUNCTION owed_sweep_lease_sql(p_slice integer) RETURNS text
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT '
UPDATE owed_notifications n
   SET state = ''leased'', lease_until = coalesce($1::timestamptz, now()) + make_interval(secs => $2),
       queue_generation = n.queue_generation + CASE WHEN n.published_at IS NULL THEN 0 ELSE 1 END,
       updated_at = coalesce($1::timestamptz, now())
  FROM (SELECT id FROM owed_notifications
         WHERE settled_at IS NULL
           AND due_at <= coalesce($1::timestamptz, now()) + make_interval(secs => $3)
           AND (expires_at IS NULL OR expires_at > coalesce($1::timestamptz, now()))'
    || CASE p_slice
         WHEN 1 THEN '
           AND state = ''pending'' AND (due_at, id) > ($5::timestamptz, $6::bigint)'
         WHEN 2 THEN '
           AND state <> ''pending'' AND lease_until <= coalesce($1::timestamptz, now())'
         ELSE '
           AND (state = ''pending'' OR lease_until <= coalesce($1::timestamptz, now()))'
       END || '
         ORDER BY due_at, id
         LIMIT $4
         FOR UPDATE SKIP LOCKED) owed
 WHERE n.id = owed.id
RETURNING n.id, n.tenant_id, n.due_at, n.published_at IS NOT NULL, n.queue_generation'
$$;
ALTER FUNCTION owed_sweep_lease_sql(integer) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_lease_sql(integer) FROM PUBLIC;

-- owed_sweep_lease runs one slice of the lease and returns the rows it
-- leased.
CREATE FUNCTION owed_sweep_lease(p_slice integer, p_now timestamptz, p_for double precision,
                                 p_ahead double precision, p_limit integer, p_after_due timestamptz,
                                 p_after_id bigint)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, republish boolean, queue_generation integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN QUERY EXECUTE owed_sweep_lease_sql(p_slice)
        USING p_now, p_for, p_ahead, p_limit, p_after_due, p_after_id;
END
$$;
ALTER FUNCTION owed_sweep_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) TO owed_runtime;

-- owed_sweep_explain_lease runs one slice under EXPLAIN (ANALYZE, BUFFERS)
-- and returns the plan; it leases what the slice would, so its caller
-- (ledger.ExplainLease) rolls the transaction back.
CREATE FUNCTION owed_sweep_explain_lease(p_slice integer, p_now timestamptz, p_for double precision,
                                         p_ahead double precision, p_limit integer, p_after_due timestamptz,
                                         p_after_id bigint)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    doc json;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || owed_sweep_lease_sql(p_slice)
        INTO doc USING p_now, p_for, p_ahead, p_limit, p_after_due, p_after_id;
    RETURN doc;
END
$$;
ALTER FUNCTION owed_sweep_explain_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_explain_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_explain_lease(integer, timestamptz, double precision, double precision, integer, timestamptz, bigint) TO owed_runtime;

-- owed_sweep_lease_due is the pending slice bounded by the backpressure cap
-- as well: in one call it counts the rows a live lease holds by the
-- publish-ahead horizon (up to the cap, as owed_sweep_survey counts them)
-- and leases at most the limit, never more than the cap minus that count,
-- oldest first after the cursor. Every row it returns carries the count,
-- and it returns one row of the count alone when it leased nothing, so a
-- run that was held back still learns why. It is the fast path's lease,
-- run when owed_due wakes the sweeper (due_notify.sql).
CREATE FUNCTION owed_sweep_lease_due(p_now timestamptz, p_for double precision, p_ahead double precision,
                                     p_limit integer, p_after_due timestamptz, p_after_id bigint,
                                     p_capacity integer)
RETURNS TABLE (held bigint, id bigint, tenant_id text, due_at timestamptz, republish boolean,
               queue_generation integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    n bigint;
    room integer;
BEGIN
    SELECT count(*) INTO n
      FROM (SELECT FROM owed_notifications o
             WHERE o.settled_at IS NULL
               AND o.due_at <= coalesce(p_now, now()) + make_interval(secs => p_ahead)
               AND o.state <> 'pending' AND o.lease_until > coalesce(p_now, now())
             LIMIT p_capacity) h;
    room := least(p_limit::bigint, p_capacity::bigint - n)::integer;
    IF room > 0 THEN
        RETURN QUERY EXECUTE 'WITH l AS (' || owed_sweep_lease_sql(1) || ') SELECT $7::bigint, l.* FROM l'
            USING p_now, p_for, p_ahead, room, p_after_due, p_after_id, n;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY SELECT n, NULL::bigint, NULL::text, NULL::timestamptz, NULL::boolean, NULL::integer;
END
$$;
ALTER FUNCTION owed_sweep_lease_due(timestamptz, double precision, double precision, integer, timestamptz, bigint, integer) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_lease_due(timestamptz, double precision, double precision, integer, timestamptz, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_lease_due(timestamptz, double precision, double precision, integer, timestamptz, bigint, integer) TO owed_runtime;

-- owed_sweep_survey is what a sweep run decides from: how many rows a live
-- lease holds by the horizon (counted up to p_count_up_to), whether a
-- pending row or a lapsed lease is waiting, and the oldest due time still
-- owed, as of asked_at.
CREATE FUNCTION owed_sweep_survey(p_now timestamptz, p_count_up_to integer, p_ahead double precision)
RETURNS TABLE (outstanding bigint, pending boolean, requeues boolean, oldest_due_at timestamptz,
               asked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT (SELECT count(*) FROM (SELECT FROM owed_notifications
                               WHERE settled_at IS NULL
                                 AND due_at <= coalesce($1, now()) + make_interval(secs => $3)
                                 AND state <> 'pending' AND lease_until > coalesce($1, now())
                               LIMIT $2) held),
       EXISTS (SELECT FROM owed_notifications
                WHERE settled_at IS NULL
                  AND due_at <= coalesce($1, now()) + make_interval(secs => $3)
                  AND (expires_at IS NULL OR expires_at > coalesce($1, now()))
                  AND state = 'pending'),
       EXISTS (SELECT FROM owed_notifications
                WHERE settled_at IS NULL
                  AND due_at <= coalesce($1, now()) + make_interval(secs => $3)
                  AND (expires_at IS NULL OR expires_at > coalesce($1, now()))
                  AND state <> 'pending' AND lease_until <= coalesce($1, now())),
       (SELECT min(due_at) FROM owed_notifications
         WHERE settled_at IS NULL AND due_at <= coalesce($1, now())),
       coalesce($1, now())
$$;
ALTER FUNCTION owed_sweep_survey(timestamptz, integer, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_survey(timestamptz, integer, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_survey(timestamptz, integer, double precision) TO owed_runtime;

-- owed_sweep_leasable says whether the lease would find a row now.
CREATE FUNCTION owed_sweep_leasable(p_now timestamptz, p_ahead double precision) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT EXISTS (SELECT 1 FROM owed_notifications
                WHERE settled_at IS NULL
                  AND due_at <= coalesce($1, now()) + make_interval(secs => $2)
                  AND (expires_at IS NULL OR expires_at > coalesce($1, now()))
                  AND (state = 'pending' OR lease_until <= coalesce($1, now())))
$$;
ALTER FUNCTION owed_sweep_leasable(timestamptz, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_leasable(timestamptz, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_leasable(timestamptz, double precision) TO owed_runtime;

-- owed_sweep_settle_failed settles one unsettled row failed with the
-- reason, when a statement the sweep shares between rows cannot apply it:
-- the row is set aside alone and the others go on. Settling a row a worker
-- was sending applies the intent waiting on it (owed_apply_intent); when
-- that is what fails (an intent whose times the row cannot hold), the
-- intent is closed as superseded, the reason says so, and the row is
-- settled. It answers whether it settled the row; false leaves the row as
-- it was, for the next run.
CREATE FUNCTION owed_sweep_settle_failed(p_id bigint, p_now timestamptz, p_reason text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    reason text := p_reason;
BEGIN
    FOR attempt IN 1..2 LOOP
        BEGIN
            IF attempt = 2 THEN
                UPDATE owed_notifications SET intent_outcome = 'superseded'
                 WHERE id = p_id AND intent IS NOT NULL AND intent_outcome IS NULL;
                IF NOT FOUND THEN
                    RETURN false;
                END IF;
                reason := reason || '; the ' || (SELECT intent FROM owed_notifications WHERE id = p_id)
                          || ' waiting on it could not be applied';
            END IF;
            UPDATE owed_notifications
               SET state = 'failed', settled_at = coalesce(p_now, now()), lease_until = NULL,
                   last_error = left(reason, 2000), updated_at = coalesce(p_now, now())
             WHERE id = p_id AND settled_at IS NULL;
            RETURN FOUND;
        EXCEPTION WHEN OTHERS THEN
            NULL;
        END;
    END LOOP;
    RETURN false;
END
$$;
REVOKE EXECUTE ON FUNCTION owed_sweep_settle_failed(bigint, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_settle_failed(bigint, timestamptz, text) TO owed_definer;

-- owed_sweep_overdue locks up to p_limit owed rows past their expiry,
-- soonest first, skipping a row a live claim is sending (its worker settles
-- it) and rows another transaction has locked.
CREATE FUNCTION owed_sweep_overdue(p_now timestamptz, p_limit integer) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT id FROM owed_notifications
     WHERE settled_at IS NULL
       AND expires_at <= coalesce(p_now, now())
       AND (state <> 'sending' OR lease_until <= coalesce(p_now, now()))
     ORDER BY expires_at
     LIMIT p_limit
       FOR UPDATE SKIP LOCKED;
END
$$;
REVOKE EXECUTE ON FUNCTION owed_sweep_overdue(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_overdue(timestamptz, integer) TO owed_definer;

-- owed_sweep_expire_rows settles the rows p_ids (locked by
-- owed_sweep_overdue) expired, and counts them.
CREATE FUNCTION owed_sweep_expire_rows(p_ids bigint[], p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v bigint;
BEGIN
    WITH expired AS (
        UPDATE owed_notifications
           SET state = 'expired', settled_at = coalesce(p_now, now()), lease_until = NULL,
               updated_at = coalesce(p_now, now()), last_error = 'expired before it was sent'
         WHERE id = ANY (p_ids) AND settled_at IS NULL
        RETURNING 1
    )
    SELECT count(*) INTO v FROM expired;
    RETURN v;
END
$$;
REVOKE EXECUTE ON FUNCTION owed_sweep_expire_rows(bigint[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_expire_rows(bigint[], timestamptz) TO owed_definer;

-- owed_sweep_expire settles as expired up to p_limit overdue rows
-- (owed_sweep_overdue) in one statement. When one row fails it (settling a
-- row a worker was sending applies the intent waiting on it, which can
-- fail), it takes the overdue rows again one at a time: a row that still
-- fails is settled failed with the reason (owed_sweep_settle_failed), and
-- the others expire, so one row never stops every run's expiry.
CREATE FUNCTION owed_sweep_expire(p_now timestamptz, p_limit integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    n bigint := 0;
    r bigint;
    err text;
BEGIN
    BEGIN
        RETURN owed_sweep_expire_rows(ARRAY(SELECT owed_sweep_overdue(p_now, p_limit)), p_now);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
        RAISE WARNING 'owed_sweep_expire: a row failed the expiry (%); expiring one row at a time', err;
    END;
    FOR r IN SELECT owed_sweep_overdue(p_now, p_limit) LOOP
        BEGIN
            n := n + owed_sweep_expire_rows(ARRAY[r], p_now);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
            PERFORM owed_sweep_settle_failed(r, p_now, 'set aside by the sweep, past its expiry: ' || err);
        END;
    END LOOP;
    RETURN n;
END
$$;
ALTER FUNCTION owed_sweep_expire(timestamptz, integer) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_expire(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_expire(timestamptz, integer) TO owed_runtime;

-- owed_sweep_mark_queued marks the leased rows the sweep published: queued,
-- published now, and due for a republish p_requeue_after seconds after the
-- latest of now, the row's due time and its not-before (its message
-- surfaces at the later of those two), should no worker claim it.
CREATE FUNCTION owed_sweep_mark_queued(p_ids bigint[], p_now timestamptz, p_requeue_after double precision)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v bigint;
BEGIN
    WITH marked AS (
        UPDATE owed_notifications n
           SET state = 'queued', published_at = coalesce($2, now()),
               lease_until = greatest(coalesce($2, now()), n.due_at, n.not_before) + make_interval(secs => $3),
               updated_at = coalesce($2, now())
          FROM (SELECT id FROM owed_notifications WHERE id = ANY($1) AND state = 'leased' ORDER BY id FOR UPDATE) l
         WHERE n.id = l.id AND n.state = 'leased'
        RETURNING 1
    )
    SELECT count(*) INTO v FROM marked;
    RETURN v;
END
$$;
ALTER FUNCTION owed_sweep_mark_queued(bigint[], timestamptz, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_mark_queued(bigint[], timestamptz, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_mark_queued(bigint[], timestamptz, double precision) TO owed_runtime;

-- owed_sweep_release hands back, pending, the rows the sweep leased and
-- could not publish (owed_unpublished): a pending row the lease wrote
-- queued loses the publish instant the lease gave it, so it stays a row
-- never published.
CREATE FUNCTION owed_sweep_release(p_ids bigint[], p_now timestamptz) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH released AS (
    UPDATE owed_notifications n
       SET state = 'pending', lease_until = NULL, updated_at = coalesce($2, now()),
           published_at = CASE WHEN n.state = 'queued' THEN NULL ELSE n.published_at END
      FROM (SELECT id FROM owed_notifications
             WHERE id = ANY($1) AND owed_unpublished(state, published_at, updated_at) ORDER BY id FOR UPDATE) l
     WHERE n.id = l.id AND owed_unpublished(n.state, n.published_at, n.updated_at)
    RETURNING 1
)
SELECT count(*) FROM released
$$;
ALTER FUNCTION owed_sweep_release(bigint[], timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_release(bigint[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_release(bigint[], timestamptz) TO owed_runtime;

-- owed_sweep_set_aside settles as failed a row the sweep leased and cannot
-- publish (its message cannot be built; owed_unpublished), with the reason
-- on the row.
CREATE FUNCTION owed_sweep_set_aside(p_id bigint, p_now timestamptz, p_reason text) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH failed AS (
    UPDATE owed_notifications
       SET state = 'failed', settled_at = coalesce($2, now()), lease_until = NULL,
           last_error = $3, updated_at = coalesce($2, now())
     WHERE id = $1 AND owed_unpublished(state, published_at, updated_at)
    RETURNING 1
)
SELECT count(*) FROM failed
$$;
ALTER FUNCTION owed_sweep_set_aside(bigint, timestamptz, text) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_set_aside(bigint, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_set_aside(bigint, timestamptz, text) TO owed_runtime;

-- The fair lease. owed_sweep_lease, owed_sweep_lease_due, owed_sweep_survey
-- and owed_sweep_leasable above are one global oldest-first line under one
-- backpressure cap, kept for the previous release only; internal/ledger
-- calls the functions below, which share each slice between the tenants
-- with rows owed and between provider accounts (docs/fairness.md).
--
-- A provider account is what the workers pace (owed_provider_pace): the
-- worker routes each channel to a provider, and channels routed to one
-- provider share its account. The sweeper reads the same routing
-- (OWED_PROVIDER, OWED_PROVIDER_<CHANNEL>) and passes it as three arrays:
-- p_channels, the account number (1-based) of each in p_accounts, and each
-- account's provider name in p_names; a channel not listed is the first
-- account's, the default provider's. An account named "twilio" is every
-- pace row "twilio" or "twilio:…" (a Sender's Name() is its provider's
-- name, then the account's own part).

-- owed_sweep_account_of is the account number of a channel. It is inlined
-- into the statements that call it, so it costs an array look-up per row.
CREATE FUNCTION owed_sweep_account_of(p_channel text, p_channels text[], p_accounts integer[]) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
SELECT coalesce(p_accounts[array_position(p_channels, p_channel)], 1)
$$;
REVOKE EXECUTE ON FUNCTION owed_sweep_account_of(text, text[], integer[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_account_of(text, text[], integer[]) TO owed_definer;

-- owed_sweep_open_accounts is the accounts on-call does not hold
-- (owed_provider_account_hold, account.sql): a held account's rows are left
-- out of the lease and count against nothing. An account's open circuit
-- (an account error) is not a hold: its workers need a message to probe
-- with, so its rows are still leased and wait in the queue.
CREATE FUNCTION owed_sweep_open_accounts(p_names text[]) RETURNS SETOF integer
LANGUAGE sql STABLE AS $$
SELECT a FROM generate_subscripts(p_names, 1) a
 WHERE NOT EXISTS (SELECT FROM owed_provider_pace p
                    WHERE p.held_at IS NOT NULL
                      AND (p.account = p_names[a] OR split_part(p.account, ':', 1) = p_names[a]))
$$;
REVOKE EXECUTE ON FUNCTION owed_sweep_open_accounts(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_open_accounts(text[]) TO owed_definer;

-- owed_sweep_in_flight counts, per tenant and account, the rows a live
-- lease holds (leased, queued or sending): those due by p_now (in the
-- queue or being sent) and those due by p_horizon (published ahead as
-- well). A paused tenant's rows count against nothing. A lease that ends
-- after p_live_until is a wait parked in the ledger (a retry hours away, a
-- row an application wrote with a lease of its own), not work in the
-- queue, and is not counted either, so it can never hold back a sweep. It
-- reads owed_notifications_in_flight's range (p_now, p_live_until], so it
-- costs the rows in flight, never the backlog, and at most p_limit of them.
-- The paused tenants are read once per statement, as an array (an init
-- plan), and the rows are counted per tenant and channel before each
-- channel's account is found: the lease's prepared statement has a generic
-- plan, which probed owed_tenant_pauses' key once per row in flight (about
-- 2,000 probes per slice in bench/e2e) and sorted every row to group it.
-- A row a worker handed back to the ledger (its lease_until is its
-- not_before: no message is in the queue or in a worker) counts against
-- nothing while it waits, and a row published to surface at its
-- not_before counts as published ahead until then.
CREATE FUNCTION owed_sweep_in_flight(p_now timestamptz, p_horizon timestamptz, p_live_until timestamptz,
                                     p_channels text[], p_accounts integer[], p_limit integer)
RETURNS TABLE (tenant_id text, account integer, due_now bigint, due_by_horizon bigint)
LANGUAGE sql STABLE AS $$
SELECT g.tenant_id, owed_sweep_account_of(g.channel, p_channels, p_accounts),
       sum(g.due_now)::bigint, sum(g.total)::bigint
  FROM (SELECT f.tenant_id, f.channel,
               count(*) FILTER (WHERE greatest(f.due_at, f.not_before) <= p_now) AS due_now, count(*) AS total
          FROM (SELECT o.tenant_id, o.channel, o.due_at, o.not_before FROM owed_notifications o
                 WHERE o.state IN ('leased', 'queued', 'sending')
                   AND o.lease_until > p_now AND o.lease_until <= p_live_until AND o.due_at <= p_horizon
                   AND NOT coalesce(owed_handed_back(o.state, o.lease_until, o.not_before), false)
                   AND o.tenant_id <> ALL ((SELECT coalesce(array_agg(tp.tenant_id), '{}')
                                              FROM owed_tenant_pauses tp)::text[])
                 LIMIT p_limit) f
         GROUP BY f.tenant_id, f.channel) g
 GROUP BY 1, 2
$$;
REVOKE EXECUTE ON FUNCTION owed_sweep_in_flight(timestamptz, timestamptz, timestamptz, text[], integer[], integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_in_flight(timestamptz, timestamptz, timestamptz, text[], integer[], integer) TO owed_definer;

-- owed_sweep_fair_lease_sql is the text of one fair slice, in three parts:
--   pick   chooses the slice's rows, locks them (FOR UPDATE SKIP LOCKED)
--          and answers them in the slice's order (id, account, ord, and
--          whether its lease ran out), then one row per account (id NULL)
--          with its rows in flight, the cap's
--          room it had, the rows it held back for want of room and whether
--          a tenant may have more rows than this slice looked at;
--   lease  pick, then leases the picked rows in the same statement and
--          answers them (id, tenant, due time, republish, generation,
--          account, state, ord, requeue) and the accounts' rows, ordered so that the
--          whole statement has run before the first row is answered;
--   row    leases the one row $11, as lease leases each, and answers it
--          as lease does, in place $12, a requeue when $13, with the
--          not-before $14 (the fallback of owed_sweep_lease_fair_queued
--          when one row fails the shared statement).
-- p_slice picks the rows as owed_sweep_lease_sql does: 1 pending rows, 2
-- rows whose lease ran out (a lost message, a dead worker, a wait the
-- worker handed to the ledger that is over), 0 both.
--
-- p_not_before takes a row a worker handed back to the ledger
-- (ledger.HandBack: queued, its lease_until its not_before) once its
-- not-before falls within the publish-ahead horizon, as a pending row is
-- taken by its due time, and answers the not-before after the statement's
-- now, the instant the row's message is to surface. The row is placed as
-- due only from its not-before, so until then it counts, as a row
-- published ahead does, against the room for rows published ahead. The
-- previous release's lease (owed_sweep_lease_fair) passes false: its
-- sweeper publishes no delay but the due time's, so it takes such a row
-- only once its lease ran out, and every not-before answered is NULL.
--
-- How a slice shares: each account's cap (p_caps, the rows its workers can
-- send in a few seconds: internal/sweep) less its rows in flight is its
-- room; a slice takes at most p_share of each room. Within an account the
-- room is dealt round-robin between the tenants with rows waiting, each
-- tenant's own rows oldest owed first: a row's place is its rank within its
-- tenant plus the tenant's rows already in flight, so a tenant holding
-- less of the account goes first (water-filling), and the lowest places
-- win. A row is owed since greatest(due_at, created_at): a row scheduled
-- with a due time long past is owed from when it was written, and never
-- jumps rows that were waiting before it. Rows already due are placed
-- before rows published ahead of their due time, and only rows due now
-- count against the room for rows due now: a row published ahead waits,
-- delayed, in the queue, and must not keep a due row out.
--
-- Pending rows are read per (tenant, channel) from
-- owed_notifications_pending_owed: a recursive skip scan finds each
-- (tenant, channel) with pending rows and its oldest, and the rows of those
-- owed by the horizon are read up to an equal part of their account's room
-- each, so a slice costs one index probe per (tenant, channel) with pending
-- rows plus the rows it looks at, never the backlog or the ledger. A
-- paused tenant and a held account are left out before any row is read.
-- Rows whose lease ran out are read by lease_until from
-- owed_notifications_in_flight, up to four slices of them.
--
-- A row the slice takes whose due time no message can carry (infinite, or
-- outside the years 1 to 9999: only SQL can write one) is settled failed
-- with the reason instead of leased, so it never fails the statement or
-- the messages of the other rows.
--
-- The rows in flight (flight) come from owed_sweep_in_flight, whose limit
-- is a row beside it (lim) rather than a sub-select among its arguments: a
-- sub-select argument keeps PostgreSQL from inlining the function, and a
-- function not inlined has its body planned again on every call, across
-- every partition of the ledger, under a prepared slice too
-- (docs/performance.md).
--
-- Parameters: $1 now (NULL: the database's), $2 the lease and $3 the
-- publish-ahead window in seconds, $4 the limit, $5 p_channels, $6
-- p_accounts, $7 p_names, $8 the accounts' caps, $9 the share of each
-- room, $10 how far ahead a live lease may end, in seconds, $11 to $13
-- the row, its place and whether it is a requeue, $14 its not-before (part
-- row), $15 the requeue-after in seconds (NULL: every row leased, as the
-- previous release's sweeper marks them after their publish). Every answer carries the statement's now, so the caller counts
-- publish delays from the database's clock. It is the definer's own: the
-- runtime role cannot run it.
CREATE FUNCTION owed_sweep_fair_lease_sql(p_slice integer, p_part text, p_not_before boolean) RETURNS text
LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $fn$
DECLARE
    -- The instants every part reads: now, the publish-ahead horizon, and
    -- how far a live lease may end.
    clock constant text := '
clock AS MATERIALIZED (
    SELECT coalesce($1::timestamptz, now()) AS now,
           coalesce($1::timestamptz, now()) + make_interval(secs => $3::double precision) AS horizon,
           coalesce($1::timestamptz, now()) + make_interval(secs => $10::double precision) AS live_until)';
    -- A due time a message can carry.
    ok constant text := '(n.due_at >= ''0001-01-01 00:00:00+00''::timestamptz
           AND n.due_at < ''10000-01-01 00:00:00+00''::timestamptz)';
    -- How a leased row changes: leased until now + $2, its next queue
    -- generation when it was published before (a republish); or settled
    -- failed when no message can carry its due time. With $15, the
    -- requeue-after in seconds, a pending row is written straight to what
    -- the queued mark (owed_sweep_mark_queued) would write once its
    -- message is accepted: queued, published now, its lease ending $15
    -- after the later of now and its due time. That is one row write
    -- fewer per delivery; a publish the queue refuses hands the row back
    -- (owed_sweep_release), and a sweep that dies before its publish
    -- leaves the row to the lapsed-lease requeue $15 after its due time
    -- (docs/reliability.md). A row whose lease ran out is leased, and
    -- marked after its publish, as before: its intents (intents.sql) tell
    -- the sweep's lease from a worker's hand-back by the state leased.
    -- Without $15 (the previous release's lease) every row is leased.
    -- Each part then sets not_before to the row's as the slice took it (a
    -- hand-back's, NULL for any other row), so a lease never carries an
    -- earlier wait's.
    fresh constant text := '(n.state = ''pending'' AND $15::double precision IS NOT NULL)';
    lease_set constant text := '
   SET state = CASE WHEN NOT ' || ok || ' THEN ''failed'' WHEN ' || fresh || ' THEN ''queued'' ELSE ''leased'' END,
       lease_until = CASE WHEN NOT ' || ok || ' THEN NULL
                          WHEN ' || fresh || ' THEN greatest(c.now, n.due_at) + make_interval(secs => $15::double precision)
                          ELSE c.now + make_interval(secs => $2::double precision) END,
       published_at = CASE WHEN ' || ok || ' AND ' || fresh || ' THEN c.now ELSE n.published_at END,
       settled_at = CASE WHEN ' || ok || ' THEN NULL ELSE c.now END,
       last_error = CASE WHEN ' || ok || ' THEN n.last_error
                         ELSE ''set aside by the sweep: due_at '' || n.due_at::text
                              || '' is outside 0001-01-01 to 9999-12-31 UTC, so no message can carry it'' END,
       queue_generation = n.queue_generation
                          + CASE WHEN ' || ok || ' AND n.published_at IS NOT NULL THEN 1 ELSE 0 END,
       updated_at = c.now';
    -- A lease that ran out, or (p_not_before) a row handed back to the
    -- ledger whose not-before falls by the horizon: no message of it is
    -- anywhere.
    lapsed_lease constant text := CASE WHEN p_not_before
        THEN 'o.lease_until <= c.horizon
           AND (o.lease_until <= c.now OR owed_handed_back(o.state, o.lease_until, o.not_before))'
        ELSE 'o.lease_until <= c.now' END;
    -- The rows of the slice, as the statement that locks them checks again.
    owed text := CASE p_slice
        WHEN 1 THEN 'o.state = ''pending'''
        WHEN 2 THEN 'o.state IN (''leased'', ''queued'', ''sending'') AND ' || lapsed_lease
        ELSE '(o.state = ''pending'' OR (o.state IN (''leased'', ''queued'', ''sending'') AND ' || lapsed_lease || '))'
    END;
    pick text;
BEGIN
    IF p_part = 'row' THEN
        RETURN 'WITH ' || clock || '
UPDATE owed_notifications n' || lease_set || ',
       not_before = $14::timestamptz
  FROM clock c
 WHERE n.id = $11::bigint
RETURNING n.id, n.tenant_id, CASE WHEN n.state IN (''leased'', ''queued'') THEN n.due_at END,
          n.state = ''leased'' AND n.published_at IS NOT NULL,
          n.queue_generation, owed_sweep_account_of(n.channel, $5::text[], $6::integer[]), n.state, $12::bigint,
          $13::boolean, NULL::integer, NULL::integer, NULL::integer, NULL::boolean, c.now, n.not_before';
    END IF;

    pick := 'WITH RECURSIVE ' || clock || ',
acct AS MATERIALIZED (
    SELECT a, ($8::integer[])[a] AS cap FROM owed_sweep_open_accounts($7::text[]) a),
flight AS MATERIALIZED (
    SELECT f.tenant_id, f.account AS a, f.due_now, f.due_by_horizon
      FROM clock c,
           (SELECT least(2 * coalesce(sum(cap), 0) + $4::integer, 2147483647)::integer AS n FROM acct) lim,
           owed_sweep_in_flight(c.now, c.horizon, c.live_until, $5::text[], $6::integer[], lim.n) f),
room AS MATERIALIZED (
    SELECT acct.a, coalesce(sum(f.due_by_horizon), 0)::integer AS outstanding,
           floor(greatest(acct.cap - coalesce(sum(f.due_now), 0), 0) * $9::double precision)::integer AS quota_now,
           floor(greatest(acct.cap - coalesce(sum(f.due_by_horizon), 0), 0) * $9::double precision)::integer AS quota_all
      FROM acct LEFT JOIN flight f ON f.a = acct.a
     GROUP BY acct.a, acct.cap)';
    IF p_slice IN (0, 1) THEN
        pick := pick || ',
grp AS (
    (SELECT o.tenant_id, o.channel, greatest(o.due_at, o.created_at) AS first_owed
       FROM owed_notifications o
      WHERE o.state = ''pending''
      ORDER BY o.tenant_id, o.channel, greatest(o.due_at, o.created_at), o.due_at, o.id
      LIMIT 1)
    UNION ALL
    SELECT nx.tenant_id, nx.channel, nx.first_owed
      FROM grp g CROSS JOIN LATERAL (
        SELECT o.tenant_id, o.channel, greatest(o.due_at, o.created_at) AS first_owed
          FROM owed_notifications o
         WHERE o.state = ''pending'' AND (o.tenant_id, o.channel) > (g.tenant_id, g.channel)
         ORDER BY o.tenant_id, o.channel, greatest(o.due_at, o.created_at), o.due_at, o.id
         LIMIT 1) nx),
live AS MATERIALIZED (
    SELECT g.tenant_id, g.channel, owed_sweep_account_of(g.channel, $5::text[], $6::integer[]) AS a
      FROM grp g, clock c
     WHERE g.first_owed <= c.horizon
       AND NOT EXISTS (SELECT FROM owed_tenant_pauses tp WHERE tp.tenant_id = g.tenant_id)),
per AS MATERIALIZED (
    SELECT r.a, count(*) AS groups,
           least($4::integer, ceil(r.quota_now::numeric / count(*)))::integer AS per_group
      FROM live l JOIN room r ON r.a = l.a
     GROUP BY r.a, r.quota_now),
cnt AS MATERIALIZED (
    SELECT l.tenant_id, l.channel, l.a, x.due, x.total, x.total > per.per_group AS cut
      FROM live l JOIN per ON per.a = l.a AND per.per_group > 0
     CROSS JOIN clock c
     CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE y.owed_since <= c.now)::integer AS due, count(*)::integer AS total
          FROM (SELECT greatest(o.due_at, o.created_at) AS owed_since
                  FROM owed_notifications o
                 WHERE o.state = ''pending'' AND o.tenant_id = l.tenant_id AND o.channel = l.channel
                   AND greatest(o.due_at, o.created_at) <= c.horizon
                   AND (o.expires_at IS NULL OR o.expires_at > c.now)
                 ORDER BY greatest(o.due_at, o.created_at), o.due_at, o.id
                 LIMIT per.per_group + 1) y) x),
lists AS MATERIALIZED (
    SELECT k.tenant_id, k.a, sum(k.due)::integer AS due, coalesce(max(f.due_now), 0)::integer AS held
      FROM cnt k LEFT JOIN flight f ON f.tenant_id = k.tenant_id AND f.a = k.a
     GROUP BY k.tenant_id, k.a),
level AS MATERIALIZED (
    SELECT (array_agg(q.p ORDER BY q.p))[$4::integer] AS p
      FROM (SELECT ls.a, ls.held + s.k AS p,
                   row_number() OVER (PARTITION BY ls.a ORDER BY ls.held + s.k) AS turn
              FROM lists ls CROSS JOIN LATERAL generate_series(1, ls.due) s(k)) q
      JOIN room r ON r.a = q.a
     WHERE q.turn <= r.quota_now),
pend AS MATERIALIZED (
    SELECT k.tenant_id, k.a, x.id, x.owed_since, x.created_at, x.due_at
      FROM cnt k JOIN lists ls ON ls.tenant_id = k.tenant_id AND ls.a = k.a
     CROSS JOIN level lv
     CROSS JOIN clock c
     CROSS JOIN LATERAL (
        SELECT o.id, greatest(o.due_at, o.created_at) AS owed_since, o.created_at, o.due_at
          FROM owed_notifications o
         WHERE o.state = ''pending'' AND o.tenant_id = k.tenant_id AND o.channel = k.channel
           AND greatest(o.due_at, o.created_at) <= c.horizon
           AND (o.expires_at IS NULL OR o.expires_at > c.now)
         ORDER BY greatest(o.due_at, o.created_at), o.due_at, o.id
         LIMIT CASE WHEN lv.p IS NULL THEN k.total ELSE least(k.total, greatest(lv.p - ls.held, 0)) END) x)';
    END IF;
    IF p_slice IN (0, 2) THEN
        pick := pick || ',
lapsed AS MATERIALIZED (
    SELECT x.tenant_id, x.a, x.id, x.owed_since, x.created_at, x.due_at, x.not_before
      FROM clock c CROSS JOIN LATERAL (
        SELECT o.tenant_id, owed_sweep_account_of(o.channel, $5::text[], $6::integer[]) AS a, o.id,
               greatest(o.due_at, o.created_at) AS owed_since, o.created_at, o.due_at,
               ' || CASE WHEN p_not_before THEN 'CASE WHEN owed_handed_back(o.state, o.lease_until, o.not_before)
                                                 THEN o.not_before END'
                         ELSE 'NULL::timestamptz' END || ' AS not_before
          FROM owed_notifications o
         WHERE o.state IN (''leased'', ''queued'', ''sending'') AND ' || lapsed_lease || '
           AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)
           AND NOT EXISTS (SELECT FROM owed_tenant_pauses tp WHERE tp.tenant_id = o.tenant_id)
           AND owed_sweep_account_of(o.channel, $5::text[], $6::integer[]) IN (SELECT a FROM acct)
         ORDER BY o.lease_until
         LIMIT 4 * $4::integer) x)';
    END IF;
    IF p_slice IN (0, 1) THEN
        pick := pick || ',
heldback AS MATERIALIZED (
    SELECT q.a, (greatest(0, d.due - q.quota_now)
                 + greatest(0, d.ahead - greatest(0, q.quota_all - least(q.quota_now, d.due))))::integer AS held
      FROM room q CROSS JOIN clock c CROSS JOIN LATERAL (
        SELECT coalesce((SELECT sum(k.due) FROM cnt k WHERE k.a = q.a), 0)' || CASE WHEN p_slice = 0 THEN '
               + (SELECT count(*) FROM lapsed x WHERE x.a = q.a AND greatest(x.owed_since, x.not_before) <= c.now)'
               ELSE '' END || ' AS due,
               coalesce((SELECT sum(k.total - k.due) FROM cnt k WHERE k.a = q.a), 0)' || CASE WHEN p_slice = 0 THEN '
               + (SELECT count(*) FROM lapsed x WHERE x.a = q.a AND NOT greatest(x.owed_since, x.not_before) <= c.now)'
               ELSE '' END || ' AS ahead) d)';
    END IF;
    pick := pick || ',
cand AS (' || CASE p_slice
        WHEN 1 THEN 'SELECT tenant_id, a, id, owed_since, created_at, due_at, false AS requeue,
                            NULL::timestamptz AS not_before FROM pend'
        WHEN 2 THEN 'SELECT tenant_id, a, id, owed_since, created_at, due_at, true AS requeue, not_before FROM lapsed'
        ELSE 'SELECT tenant_id, a, id, owed_since, created_at, due_at, false AS requeue,
                     NULL::timestamptz AS not_before FROM pend
          UNION ALL SELECT tenant_id, a, id, owed_since, created_at, due_at, true, not_before FROM lapsed' END || '),
ranked AS (
    SELECT x.*, greatest(x.owed_since, x.not_before) <= k.now AS due,
           row_number() OVER (PARTITION BY x.tenant_id, x.a, greatest(x.owed_since, x.not_before) <= k.now
                              ORDER BY x.owed_since, x.due_at, x.id)
           + CASE WHEN greatest(x.owed_since, x.not_before) <= k.now THEN coalesce(f.due_now, 0)
                  ELSE coalesce(f.due_by_horizon, 0) END
             AS place
      FROM cand x CROSS JOIN clock k
      LEFT JOIN flight f ON f.tenant_id = x.tenant_id AND f.a = x.a),
placed AS (
    SELECT r.*, row_number() OVER (PARTITION BY r.a, r.due
                                   ORDER BY r.place, r.owed_since, r.created_at, r.due_at, r.id) AS turn,
           count(*) FILTER (WHERE r.due) OVER (PARTITION BY r.a) AS due_rows
      FROM ranked r),
fits AS (
    SELECT p.*, (p.due AND p.turn <= q.quota_now)
                OR (NOT p.due AND p.turn <= q.quota_all - least(q.quota_now, p.due_rows)) AS fits
      FROM placed p JOIN room q ON q.a = p.a),
taken AS MATERIALIZED (
    SELECT id, a, requeue, not_before, row_number() OVER (ORDER BY NOT due, place, owed_since, created_at, due_at, id) AS ord
      FROM fits WHERE fits
     ORDER BY NOT due, place, owed_since, created_at, due_at, id
     LIMIT $4::integer),
took AS MATERIALIZED (
    SELECT array_agg(id) AS ids, jsonb_object_agg(id::text, jsonb_build_array(a, ord, requeue, not_before)) AS row
      FROM taken),
locked AS (
    SELECT x.id FROM unnest((SELECT ids FROM took)::bigint[]) AS t(id)
     CROSS JOIN clock c
     CROSS JOIN LATERAL (
        SELECT o.id FROM owed_notifications o
         WHERE o.id = t.id AND ' || owed || '
           AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)
           FOR UPDATE OF o SKIP LOCKED) x)
SELECT l.id, (t.row -> l.id::text ->> 0)::integer AS a, (t.row -> l.id::text ->> 1)::bigint AS ord,
       (t.row -> l.id::text ->> 2)::boolean AS requeue, NULL::integer AS outstanding, NULL::integer AS quota,
       NULL::integer AS held, NULL::boolean AS more, (t.row -> l.id::text ->> 3)::timestamptz AS not_before
  FROM locked l CROSS JOIN took t
UNION ALL
SELECT NULL, q.a, NULL, NULL, q.outstanding, q.quota_now,'
       || CASE WHEN p_slice IN (0, 1) THEN '
       (SELECT h.held FROM heldback h WHERE h.a = q.a)
       + CASE WHEN q.quota_now <= 0 THEN coalesce((SELECT groups FROM per WHERE per.a = q.a), 0)::integer ELSE 0 END,
       (SELECT h.held FROM heldback h WHERE h.a = q.a) = 0
         AND EXISTS (SELECT FROM cnt WHERE cnt.a = q.a AND cnt.cut)'
       ELSE '
       (SELECT count(*) FROM fits WHERE fits.a = q.a AND NOT fits.fits)::integer, false' END || ',
       NULL::timestamptz
  FROM room q';
    IF p_part = 'pick' THEN
        RETURN pick;
    END IF;
    -- The rows taken are locked one id at a time from the array (locked:
    -- a probe of the key per id, in a lateral sub-select that locks, so
    -- the planner cannot turn the join around). Written as o.id = ANY
    -- (the array), known only when the statement runs, the planner could
    -- read the pending rows' index instead and test each of them against
    -- the array: 19,345 rows tested against 200 ids took 220 ms of a 310
    -- ms lease in bench/e2e; written as a plain join with the array's
    -- elements, it put the elements inside the loop, 648,259 of them read
    -- for one lease of 181 rows (migration 00080).
    -- The picked rows reach the ledger as an array of ids (an index scan
    -- of its key), and their account, place and kind come back by id from
    -- a jsonb object, as they go from taken to locked above: a join of two
    -- CTEs is planned on guesses of their sizes, and a nested loop over
    -- hundreds of rows costs their square.
    RETURN 'WITH picked AS MATERIALIZED (' || pick || '),
' || clock || ',
slice AS MATERIALIZED (
    SELECT array_agg(id) AS ids, jsonb_object_agg(id::text, jsonb_build_array(a, ord, requeue, not_before)) AS row
      FROM picked WHERE id IS NOT NULL),
leased AS (
    UPDATE owed_notifications n' || lease_set || ',
           not_before = (s.row -> n.id::text ->> 3)::timestamptz
      FROM clock c, slice s
     WHERE n.id = ANY (s.ids)
    RETURNING n.id, n.tenant_id, CASE WHEN n.state IN (''leased'', ''queued'') THEN n.due_at END AS due_at,
              n.state = ''leased'' AND n.published_at IS NOT NULL AS republish, n.queue_generation, (s.row -> n.id::text ->> 0)::integer AS a,
              n.state, (s.row -> n.id::text ->> 1)::bigint AS ord, (s.row -> n.id::text ->> 2)::boolean AS requeue,
              n.not_before)
SELECT l.id, l.tenant_id, l.due_at, l.republish, l.queue_generation, l.a, l.state, l.ord, l.requeue,
       NULL::integer, NULL::integer, NULL::integer, NULL::boolean, (SELECT now FROM clock), l.not_before
  FROM leased l
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, p.a, NULL, NULL, NULL, p.outstanding, p.quota, p.held, p.more,
       (SELECT now FROM clock), NULL::timestamptz
  FROM picked p WHERE p.id IS NULL
 ORDER BY 8, 6';
END
$fn$;
ALTER FUNCTION owed_sweep_fair_lease_sql(integer, text, boolean) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_fair_lease_sql(integer, text, boolean) FROM PUBLIC;

-- owed_sweep_lease_fair_queued runs one fair slice
-- (owed_sweep_fair_lease_sql) and answers its rows in the slice's order,
-- then one row per account; it answers nothing at all when nothing is owed
-- to lease. p_not_before takes the rows a worker handed back to the ledger
-- by their not-before and answers it (the sweep publishes each row's
-- message to surface at the later of its due time and its not-before);
-- the sweep passes true, and the previous release's owed_sweep_lease_fair
-- false. p_requeue_after writes the pending rows it takes queued, as
-- published (their lease ending that many seconds after the later of now
-- and their due time), so the sweep marks only the rows whose lease ran
-- out once their messages are accepted; NULL leases every row, for a
-- sweeper that marks them all (owed_sweep_lease_fair_not_before).
-- When one row fails the shared statement (a trigger or a check it cannot
-- pass), it picks the slice again and leases the rows one at a time: a row
-- that still fails is settled failed with the reason
-- (owed_sweep_settle_failed) and answered in state failed, and the others
-- are leased. The shared statement answers nothing before it has run
-- whole, so a statement that fails has answered nothing.
CREATE FUNCTION owed_sweep_lease_fair_queued(p_slice integer, p_now timestamptz, p_for double precision,
                                             p_ahead double precision, p_limit integer, p_channels text[],
                                             p_accounts integer[], p_names text[], p_caps integer[],
                                             p_share double precision, p_live_for double precision,
                                             p_not_before boolean, p_requeue_after double precision)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, republish boolean, queue_generation integer,
               account integer, state text, ord bigint, requeue boolean, outstanding integer, room integer,
               held integer, more boolean, asked_at timestamptz, not_before timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    r record;
    err text;
    v_sql text;
    v_name text;
BEGIN
    -- Nothing to lease (the sweep's most frequent answer): a static
    -- statement, planned once per session, answers it without planning
    -- the slice's. The slice reads no more than this, so it would find
    -- nothing either; no account's rows are counted. Pending rows and
    -- rows whose lease ran out (or a hand-back whose not-before is near)
    -- are asked apart, each through its own partial index: the earliest
    -- pending due time, read from owed_notifications_owed_due in due
    -- order (it steps over rows in flight only), and
    -- owed_notifications_in_flight by the lease's end (an unsettled row
    -- that is not pending is leased, queued or sending; a hand-back's
    -- lease ends at its not-before). One EXISTS over both, joined by OR,
    -- read the whole ledger sequentially on every idle sweep: the planner
    -- expected settled rows' due times to match
    -- (TestIdleLeaseNeverScansTheLedger).
    IF NOT ((p_slice IN (0, 1)
             AND coalesce((SELECT o.due_at FROM owed_notifications o
                            WHERE o.settled_at IS NULL AND o.state = 'pending'
                            ORDER BY o.due_at LIMIT 1)
                          <= coalesce(p_now, now()) + make_interval(secs => p_ahead), false))
            OR (p_slice IN (0, 2)
                AND EXISTS (SELECT FROM owed_notifications o
                             WHERE o.state IN ('leased', 'queued', 'sending')
                               AND o.lease_until <= coalesce(p_now, now())
                                                    + make_interval(secs => CASE WHEN p_not_before THEN p_ahead ELSE 0 END)
                               AND (o.lease_until <= coalesce(p_now, now())
                                    OR (p_not_before AND owed_handed_back(o.state, o.lease_until, o.not_before)))
                               AND o.due_at <= coalesce(p_now, now()) + make_interval(secs => p_ahead)))) THEN
        RETURN;
    END IF;
    -- The slice's statement is prepared once per session, under a name
    -- its text gives, and executed with the call's values: planning it
    -- reads every partition of the ledger (each with its indexes and
    -- checks), which cost more than running it once the ledger had a
    -- dozen months, and a prepared statement keeps its plan between calls
    -- (docs/performance.md, "The partitioned ledger's cost on the hot
    -- path"). EXECUTE takes no parameters, so the values go in as
    -- literals, read back by the types the PREPARE declares.
    -- One slice at a time across every sweeper: a cron run, a top-up and
    -- another replica's run would otherwise pick the same oldest rows.
    -- Rows the other slice still holds are skipped (SKIP LOCKED), but a
    -- row it leased and committed after this statement's snapshot was
    -- re-checked (PostgreSQL's EvalPlanQual), which built a second copy
    -- of the whole slice's plan, every CTE across every partition, once
    -- per statement that met one: 27 % of the sweeper's CPU in a
    -- 40,000-row bench/e2e run. Taken before the slice's statement, the
    -- lock gives it a snapshot taken after the previous slice committed,
    -- so it reads what that slice left. The lock is the transaction's,
    -- released at the commit that follows the lease; an idle sweep (the
    -- check above) never takes it.
    PERFORM pg_advisory_xact_lock(hashtext('owed_sweep_lease'));
    v_sql := owed_sweep_fair_lease_sql(p_slice, 'lease', p_not_before);
    v_name := 'owed_sweep_lease_' || md5(v_sql);
    BEGIN
        IF NOT EXISTS (SELECT FROM pg_prepared_statements ps WHERE ps.name = v_name) THEN
            EXECUTE format('PREPARE %I (timestamptz, double precision, double precision, integer, text[], '
                           'integer[], text[], integer[], double precision, double precision, bigint, bigint, '
                           'boolean, timestamptz, double precision) AS %s', v_name, v_sql);
        END IF;
        RETURN QUERY EXECUTE format('EXECUTE %I (%L, %L, %L, %L, %L, %L, %L, %L, %L, %L, NULL, NULL, NULL, NULL, %L)',
                                    v_name, p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps,
                                    p_share, p_live_for, p_requeue_after);
        RETURN;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
        RAISE WARNING 'owed_sweep_lease_fair: a row failed the slice (%); leasing its rows one at a time', err;
    END;
    FOR r IN EXECUTE owed_sweep_fair_lease_sql(p_slice, 'pick', p_not_before)
        USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share, p_live_for
    LOOP
        IF r.id IS NULL THEN
            RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::timestamptz, NULL::boolean, NULL::integer, r.a,
                                NULL::text, NULL::bigint, NULL::boolean, r.outstanding, r.quota, r.held, r.more,
                                coalesce(p_now, now()), NULL::timestamptz;
            CONTINUE;
        END IF;
        BEGIN
            RETURN QUERY EXECUTE owed_sweep_fair_lease_sql(p_slice, 'row', p_not_before)
                USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share,
                      p_live_for, r.id, r.ord, r.requeue, r.not_before, p_requeue_after;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
            IF owed_sweep_settle_failed(r.id, p_now, 'set aside by the sweep: ' || err) THEN
                RETURN QUERY SELECT r.id, NULL::text, NULL::timestamptz, NULL::boolean, NULL::integer, r.a,
                                    'failed'::text, r.ord, r.requeue, NULL::integer, NULL::integer, NULL::integer,
                                    NULL::boolean, coalesce(p_now, now()), NULL::timestamptz;
            END IF;
        END;
    END LOOP;
END
$$;
ALTER FUNCTION owed_sweep_lease_fair_queued(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision, boolean, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_lease_fair_queued(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision, boolean, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_lease_fair_queued(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision, boolean, double precision) TO owed_runtime;

-- owed_sweep_lease_fair_not_before is the previous release's lease: the
-- slice with every row leased (owed_sweep_lease_fair_queued without a
-- requeue-after), since its sweeper marks every row it publishes.
CREATE FUNCTION owed_sweep_lease_fair_not_before(p_slice integer, p_now timestamptz, p_for double precision,
                                                 p_ahead double precision, p_limit integer, p_channels text[],
                                                 p_accounts integer[], p_names text[], p_caps integer[],
                                                 p_share double precision, p_live_for double precision,
                                                 p_not_before boolean)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, republish boolean, queue_generation integer,
               account integer, state text, ord bigint, requeue boolean, outstanding integer, room integer,
               held integer, more boolean, asked_at timestamptz, not_before timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT * FROM owed_sweep_lease_fair_queued(p_slice, p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names,
                                           p_caps, p_share, p_live_for, p_not_before, NULL)
$$;
ALTER FUNCTION owed_sweep_lease_fair_not_before(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision, boolean) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_lease_fair_not_before(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_lease_fair_not_before(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision, boolean) TO owed_runtime;

-- owed_sweep_lease_fair is the previous release's lease: the slice
-- without the rows handed back to the ledger ahead of their not-before,
-- whose delay its sweeper would not publish.
CREATE FUNCTION owed_sweep_lease_fair(p_slice integer, p_now timestamptz, p_for double precision,
                                      p_ahead double precision, p_limit integer, p_channels text[],
                                      p_accounts integer[], p_names text[], p_caps integer[],
                                      p_share double precision, p_live_for double precision)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, republish boolean, queue_generation integer,
               account integer, state text, ord bigint, requeue boolean, outstanding integer, room integer,
               held integer, more boolean, asked_at timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT l.id, l.tenant_id, l.due_at, l.republish, l.queue_generation, l.account, l.state, l.ord, l.requeue,
       l.outstanding, l.room, l.held, l.more, l.asked_at
  FROM owed_sweep_lease_fair_not_before(p_slice, p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names,
                                        p_caps, p_share, p_live_for, false) l
$$;
ALTER FUNCTION owed_sweep_lease_fair(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_lease_fair(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_lease_fair(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision) TO owed_runtime;

-- owed_sweep_explain_lease_fair runs one fair slice under EXPLAIN
-- (ANALYZE, BUFFERS) and returns the plan; it leases what the slice would,
-- so its caller (ledger.ExplainLease) rolls the transaction back.
CREATE FUNCTION owed_sweep_explain_lease_fair(p_slice integer, p_now timestamptz, p_for double precision,
                                              p_ahead double precision, p_limit integer, p_channels text[],
                                              p_accounts integer[], p_names text[], p_caps integer[],
                                              p_share double precision, p_live_for double precision)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    doc json;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || owed_sweep_fair_lease_sql(p_slice, 'lease', true)
        INTO doc USING p_now, p_for, p_ahead, p_limit, p_channels, p_accounts, p_names, p_caps, p_share, p_live_for,
                       NULL::bigint, NULL::bigint, NULL::boolean, NULL::timestamptz, NULL::double precision;
    RETURN doc;
END
$$;
ALTER FUNCTION owed_sweep_explain_lease_fair(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_explain_lease_fair(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_explain_lease_fair(integer, timestamptz, double precision, double precision, integer, text[], integer[], text[], integer[], double precision, double precision) TO owed_runtime;

-- owed_sweep_survey_fair is what a sweep run decides from: the rows in
-- flight of each account (owed_sweep_in_flight, at most p_count_up_to
-- read), whether a pending row, and a row whose lease ran out or a
-- worker handed back to the ledger (its not-before), are owed by the
-- horizon, and how long the oldest row already due has been owed, in
-- seconds, as of asked_at. A due time SQL wrote as -infinity is left out
-- of the age (the lease sets such a row aside), so the age is always a
-- number.
--
-- Each question reads an index of owed rows in order and stops at its
-- first answer, so an idle survey costs the rows in flight and the owed
-- rows it steps over, never the ledger. Whether a pending row is owed by
-- the horizon is asked as the earliest pending due time
-- (owed_notifications_owed_due in due order, stepping over rows in flight
-- and expired ones): asked as an EXISTS over pending rows due by the
-- horizon, the planner expected the settled rows' past due times to match
-- and read the whole table from its start, on every idle sweep
-- (TestIdleSweepNeverScansTheLedger).
CREATE FUNCTION owed_sweep_survey_fair(p_now timestamptz, p_ahead double precision, p_live_for double precision,
                                       p_channels text[], p_accounts integer[], p_names text[],
                                       p_count_up_to integer)
RETURNS TABLE (outstanding integer[], pending boolean, requeues boolean, oldest_owed_age_s double precision,
               asked_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH clock AS (
        SELECT coalesce($1, now()) AS now, coalesce($1, now()) + make_interval(secs => $2) AS horizon,
               coalesce($1, now()) + make_interval(secs => $3) AS live_until
    ), flight AS (
        SELECT f.* FROM clock c, owed_sweep_in_flight(c.now, c.horizon, c.live_until, $4, $5, $7) f
    )
    SELECT (SELECT array_agg(coalesce((SELECT sum(f.due_by_horizon) FROM flight f WHERE f.account = a), 0)::integer
                             ORDER BY a)
              FROM generate_subscripts($6, 1) a),
           coalesce((SELECT o.due_at FROM owed_notifications o
                      WHERE o.settled_at IS NULL AND o.state = 'pending'
                        AND (o.expires_at IS NULL OR o.expires_at > c.now)
                      ORDER BY o.due_at LIMIT 1) <= c.horizon, false),
           EXISTS (SELECT FROM owed_notifications o
                    WHERE o.state IN ('leased', 'queued', 'sending') AND o.lease_until <= c.horizon
                      AND (o.lease_until <= c.now OR owed_handed_back(o.state, o.lease_until, o.not_before))
                      AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)),
           (SELECT extract(epoch FROM c.now - o.due_at)::double precision FROM owed_notifications o
             WHERE o.settled_at IS NULL AND o.due_at > '-infinity' AND o.due_at <= c.now
             ORDER BY o.due_at LIMIT 1),
           c.now
      FROM clock c;
END
$$;
ALTER FUNCTION owed_sweep_survey_fair(timestamptz, double precision, double precision, text[], integer[], text[], integer) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_survey_fair(timestamptz, double precision, double precision, text[], integer[], text[], integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_survey_fair(timestamptz, double precision, double precision, text[], integer[], text[], integer) TO owed_runtime;

-- owed_sweep_leasable_fair says whether the fair lease would find a row
-- now, room allowing: a pending row owed by the horizon, or a row whose
-- lease ran out or whose not-before falls by the horizon, of a tenant not
-- paused, on an account not held.
CREATE FUNCTION owed_sweep_leasable_fair(p_now timestamptz, p_ahead double precision, p_channels text[],
                                         p_accounts integer[], p_names text[])
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH clock AS (
    SELECT coalesce($1, now()) AS now, coalesce($1, now()) + make_interval(secs => $2) AS horizon
)
SELECT EXISTS (SELECT 1 FROM owed_notifications o
                WHERE o.settled_at IS NULL AND o.due_at <= c.horizon
                  AND (o.expires_at IS NULL OR o.expires_at > c.now)
                  AND ((o.state = 'pending' AND greatest(o.due_at, o.created_at) <= c.horizon)
                       OR (o.state <> 'pending' AND o.lease_until <= c.horizon
                           AND (o.lease_until <= c.now OR owed_handed_back(o.state, o.lease_until, o.not_before))))
                  AND NOT EXISTS (SELECT FROM owed_tenant_pauses tp WHERE tp.tenant_id = o.tenant_id)
                  AND owed_sweep_account_of(o.channel, $3, $4) IN (SELECT owed_sweep_open_accounts($5)))
  FROM clock c
$$;
ALTER FUNCTION owed_sweep_leasable_fair(timestamptz, double precision, text[], integer[], text[]) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_leasable_fair(timestamptz, double precision, text[], integer[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_leasable_fair(timestamptz, double precision, text[], integer[], text[]) TO owed_runtime;

-- owed_sweep_send_rates_rows is owed_sweep_send_rates' read, with
-- enable_seqscan off, as owed_ledger_sends_per_minute_rows (operator.sql):
-- in a month's first minutes its partition of the attempts holds little
-- but the window, and the planner read that partition whole.
CREATE FUNCTION owed_sweep_send_rates_rows(p_now timestamptz, p_window double precision, p_count_up_to integer)
RETURNS TABLE (provider text, sends bigint)
LANGUAGE plpgsql STABLE SET enable_seqscan = off AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT split_part(a.provider, ':', 1), count(*)
      FROM (SELECT provider FROM owed_notification_attempts
             WHERE finished_at > coalesce($1, now()) - make_interval(secs => $2)
               AND finished_at <= coalesce($1, now())
             LIMIT $3) a
     GROUP BY 1;
END
$$;
REVOKE EXECUTE ON FUNCTION owed_sweep_send_rates_rows(timestamptz, double precision, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_send_rates_rows(timestamptz, double precision, integer) TO owed_definer;

-- owed_sweep_send_rates counts, per provider, the sends the workers
-- finished in the p_window seconds up to now (at most p_count_up_to read):
-- what an unpaced account actually sends, from which the sweep sizes how
-- much of its work to keep published (internal/sweep). A provider is the
-- part of an account's name before ':', as the sweep names accounts. The
-- read is owed_sweep_send_rates_rows, above.
CREATE FUNCTION owed_sweep_send_rates(p_now timestamptz, p_window double precision, p_count_up_to integer)
RETURNS TABLE (provider text, sends bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM owed_sweep_send_rates_rows(p_now, p_window, p_count_up_to);
END
$$;
ALTER FUNCTION owed_sweep_send_rates(timestamptz, double precision, integer) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_send_rates(timestamptz, double precision, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_send_rates(timestamptz, double precision, integer) TO owed_runtime;
