-- The worker's settle of an accepted send. Like the claim, it runs as its
-- caller, in the row's tenant scope, one round trip for the whole write.

-- owed_settle_delivered records an accepted send and settles its row. An
-- accepted send is the truth and is always recorded as an attempt; only the
-- row's fate depends on the claim's token (p_claim_seq). Everything is
-- judged on the row as it was before the update: the row is stamped
-- delivered when it is open (a failed row included: it failed while this
-- send was under way) and no other live claim holds it. A superseded
-- claim's accepted send still settles the row delivered (the provider has
-- it), unless another worker holds the row under a live claim right now:
-- that claim's send may already be under way, so the row is left to it
-- (held_elsewhere) and the attempt is recorded as a possible duplicate, as
-- is every send made under a superseded claim. An already delivered row
-- keeps its first delivered_at and message id. changed says whether the
-- row was stamped.
CREATE FUNCTION owed_settle_delivered(p_tenant text, p_id bigint, p_claim_seq bigint, p_provider text,
                                      p_started timestamptz, p_now timestamptz, p_message_id text,
                                      p_http_status integer, p_possible_duplicate boolean,
                                      OUT changed boolean, OUT held_elsewhere boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    -- Everything is judged on the row as it was before the update. The
    -- row is stamped delivered when it is open (a failed row included: it
    -- failed while this send was under way) and no other live claim holds
    -- it; an already delivered row keeps its first delivered_at and message
    -- id. The attempt is recorded in every case, because it happened.
    WITH old AS (
        SELECT n.id, n.claim_seq <> p_claim_seq AS superseded,
               coalesce(n.claim_seq <> p_claim_seq AND n.state = 'sending' AND n.lease_until > p_now, false)
                   AS held_elsewhere,
               (n.settled_at IS NULL OR n.state = 'failed') AS open
          FROM owed_notifications n WHERE n.id = p_id FOR UPDATE
    ), judged AS (
        SELECT old.*, old.open AND NOT old.held_elsewhere AS stamp FROM old
    ), settled AS (
        UPDATE owed_notifications n
           SET attempts = n.attempts + 1, updated_at = p_now,
               state = CASE WHEN j.stamp THEN 'delivered' ELSE n.state END,
               delivered_at = CASE WHEN j.stamp THEN p_now ELSE n.delivered_at END,
               settled_at = CASE WHEN j.stamp THEN p_now ELSE n.settled_at END,
               lease_until = CASE WHEN j.stamp THEN NULL ELSE n.lease_until END,
               provider = CASE WHEN j.stamp THEN p_provider ELSE n.provider END,
               provider_message_id = CASE WHEN j.stamp THEN p_message_id ELSE n.provider_message_id END,
               last_error = CASE WHEN j.stamp THEN NULL ELSE n.last_error END
          FROM judged j
         WHERE n.id = j.id
        RETURNING n.id, n.tenant_id, n.attempts, j.stamp, j.superseded, j.held_elsewhere
    ), recorded AS (
        INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
                                                finished_at, outcome, provider_message_id, http_status, error,
                                                possible_duplicate)
        SELECT id, tenant_id, attempts, p_provider, p_started, p_now, 'accepted', p_message_id,
               p_http_status, NULL, p_possible_duplicate OR superseded
          FROM settled
    )
    SELECT s.stamp, s.held_elsewhere INTO changed, held_elsewhere FROM settled s;
END
$$;

-- owed_settle_delivered_batch settles many accepted sends, possibly of many
-- tenants, in one statement and one commit, each through
-- owed_settle_delivered under its own tenant's scope, in id order so
-- concurrent batches lock rows in one order and cannot deadlock. As every
-- batch of claim.sql it never fails because of one row (see
-- owed_batch_row_error): a row whose settle raises is tried again alone
-- with the intent waiting on its send refused, since the accepted send is
-- the truth and must be recorded; a row that still cannot be is set aside
-- (owed_set_aside) and set_aside says why. set_aside is NULL for every row
-- settled.
CREATE FUNCTION owed_settle_delivered_batch(p_rows jsonb, p_now timestamptz)
RETURNS TABLE (idx integer, changed boolean, held_elsewhere boolean, set_aside text)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_idx integer[];
    v_changed boolean[];
    v_elsewhere boolean[];
    v_aside text[];
    c boolean;
    e boolean;
    a text;
    alone boolean := false;
BEGIN
    LOOP
        BEGIN
            v_idx := '{}';
            v_changed := '{}';
            v_elsewhere := '{}';
            v_aside := '{}';
            FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(
                         idx integer, tenant_id text, id bigint, claim_seq bigint, provider text,
                         started_at timestamptz, message_id text, http_status integer, possible_duplicate boolean)
             ORDER BY x.id, x.idx
            LOOP
                a := NULL;
                IF NOT alone THEN
                    SELECT s.changed, s.held_elsewhere INTO c, e
                      FROM owed_settle_delivered(r.tenant_id, r.id, r.claim_seq, r.provider, r.started_at, p_now,
                                                 r.message_id, r.http_status, r.possible_duplicate) s;
                ELSE
                    BEGIN
                        SELECT s.changed, s.held_elsewhere INTO c, e
                          FROM owed_settle_delivered(r.tenant_id, r.id, r.claim_seq, r.provider, r.started_at, p_now,
                                                     r.message_id, r.http_status, r.possible_duplicate) s;
                    EXCEPTION WHEN OTHERS THEN
                        IF NOT owed_batch_row_error(SQLSTATE) THEN
                            RAISE;
                        END IF;
                        a := SQLERRM;
                    END;
                    IF a IS NOT NULL THEN
                        BEGIN
                            PERFORM set_config('owed.tenant_id', r.tenant_id, true);
                            UPDATE owed_notifications n
                               SET intent_outcome = 'refused',
                                   last_error = concat_ws('; ', n.last_error,
                                                          'the ' || n.intent || ' waiting on the send was refused: ' || a)
                             WHERE n.id = r.id AND n.intent IS NOT NULL AND n.intent_outcome IS NULL;
                            SELECT s.changed, s.held_elsewhere INTO c, e
                              FROM owed_settle_delivered(r.tenant_id, r.id, r.claim_seq, r.provider, r.started_at,
                                                         p_now, r.message_id, r.http_status, r.possible_duplicate) s;
                            a := NULL;
                        EXCEPTION WHEN OTHERS THEN
                            IF NOT owed_batch_row_error(SQLSTATE) THEN
                                RAISE;
                            END IF;
                            a := 'the accepted send could not be recorded: ' || SQLERRM;
                            c := false;
                            e := false;
                            PERFORM owed_set_aside(r.tenant_id, r.id, a, p_now);
                        END;
                    END IF;
                END IF;
                v_idx := array_append(v_idx, r.idx);
                v_changed := array_append(v_changed, c);
                v_elsewhere := array_append(v_elsewhere, e);
                v_aside := array_append(v_aside, a);
            END LOOP;
            EXIT;
        EXCEPTION WHEN OTHERS THEN
            IF alone OR NOT owed_batch_row_error(SQLSTATE) THEN
                RAISE;
            END IF;
            alone := true;
        END;
    END LOOP;
    RETURN QUERY SELECT * FROM unnest(v_idx, v_changed, v_elsewhere, v_aside);
END
$$;

-- owed_settle_delivered_many is owed_settle_delivered_batch in one
-- set-based statement: the accepted sends come as arrays (idx, tenant, id,
-- claim token, provider, start, message id, HTTP status and the
-- possible-duplicate flag, one element per send), the scope is every tenant
-- they name (owed_tenant_scope), each row matched with the tenant its
-- send names, and the rows are locked in id order. Each row is judged as
-- owed_settle_delivered judges it, on the row as it was before the update,
-- with the outcome as CASE in one UPDATE, and every attempt is recorded by
-- one INSERT of the same statement. A send whose row is not visible
-- answers a NULL changed. A batch naming one row twice (the second send
-- must see the first's settle), or holding a row the statement cannot
-- apply, runs through owed_settle_delivered_batch instead, which records
-- each in turn and sets such a row aside alone.
--
-- It reads and plans as owed_claim_many does (claim.sql).
CREATE FUNCTION owed_settle_delivered_many(p_idx integer[], p_tenant text[], p_id bigint[], p_claim_seq bigint[],
                                           p_provider text[], p_started timestamptz[], p_message_id text[],
                                           p_http_status integer[], p_possible_duplicate boolean[],
                                           p_now timestamptz)
RETURNS TABLE (idx integer, changed boolean, held_elsewhere boolean, set_aside text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_hashjoin = off SET enable_mergejoin = off
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
#variable_conflict use_column
DECLARE
    v_idx integer[];
    v_changed boolean[];
    v_elsewhere boolean[];
BEGIN
    IF cardinality(p_id) = (SELECT count(DISTINCT x) FROM unnest(p_id) x) THEN
        BEGIN
            PERFORM set_config('owed.tenant_ids', (SELECT array_agg(DISTINCT t) FROM unnest(p_tenant) t)::text, true);
            WITH req AS (
                SELECT * FROM unnest(p_idx, p_tenant, p_id, p_claim_seq, p_provider, p_started, p_message_id,
                                     p_http_status, p_possible_duplicate)
                    AS r(idx, tenant_id, id, claim_seq, provider, started_at, message_id, http_status,
                         possible_duplicate)
            ), old AS (
                -- owed_settle_delivered's judgement, on the rows as they
                -- were, locked in id order.
                SELECT n.id, r.idx, r.provider, r.started_at, r.message_id, r.http_status, r.possible_duplicate,
                       n.claim_seq <> r.claim_seq AS superseded,
                       coalesce(n.claim_seq <> r.claim_seq AND n.state = 'sending' AND n.lease_until > p_now, false)
                           AS held_elsewhere,
                       (n.settled_at IS NULL OR n.state = 'failed') AS open
                  FROM owed_notifications n JOIN req r ON n.id = r.id AND n.tenant_id = r.tenant_id
                 ORDER BY n.id
                   FOR UPDATE OF n
            ), judged AS (
                SELECT old.*, old.open AND NOT old.held_elsewhere AS stamp FROM old
            ), settled AS (
                UPDATE owed_notifications n
                   SET attempts = n.attempts + 1, updated_at = p_now,
                       state = CASE WHEN j.stamp THEN 'delivered' ELSE n.state END,
                       delivered_at = CASE WHEN j.stamp THEN p_now ELSE n.delivered_at END,
                       settled_at = CASE WHEN j.stamp THEN p_now ELSE n.settled_at END,
                       lease_until = CASE WHEN j.stamp THEN NULL ELSE n.lease_until END,
                       provider = CASE WHEN j.stamp THEN j.provider ELSE n.provider END,
                       provider_message_id = CASE WHEN j.stamp THEN j.message_id ELSE n.provider_message_id END,
                       last_error = CASE WHEN j.stamp THEN NULL ELSE n.last_error END
                  FROM judged j
                 WHERE n.id = j.id
                RETURNING n.id, n.tenant_id, n.attempts, j.idx, j.provider, j.started_at, j.message_id, j.http_status,
                          j.possible_duplicate, j.superseded, j.held_elsewhere, j.stamp
            ), recorded AS (
                -- The attempt is recorded in every case, because it
                -- happened.
                INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
                                                        finished_at, outcome, provider_message_id, http_status,
                                                        error, possible_duplicate)
                SELECT s.id, s.tenant_id, s.attempts, s.provider, s.started_at, p_now, 'accepted', s.message_id,
                       s.http_status, NULL, s.possible_duplicate OR s.superseded
                  FROM settled s
            ), answers AS MATERIALIZED (
                -- Each send's answer, by idx (a join of the two CTEs would
                -- be a nested loop over a batch: owed_claim_many, claim.sql,
                -- says why).
                SELECT jsonb_object_agg(idx::text, jsonb_build_array(stamp, held_elsewhere)) AS ans FROM settled
            )
            SELECT array_agg(r.idx), array_agg((s.ans -> r.idx::text ->> 0)::boolean),
                   array_agg((s.ans -> r.idx::text ->> 1)::boolean)
              INTO v_idx, v_changed, v_elsewhere
              FROM req r CROSS JOIN answers s;
            RETURN QUERY SELECT *, NULL::text FROM unnest(v_idx, v_changed, v_elsewhere);
            RETURN;
        EXCEPTION WHEN OTHERS THEN
            IF NOT owed_batch_row_error(SQLSTATE) THEN
                RAISE;
            END IF;
        END;
    END IF;
    RETURN QUERY
    SELECT * FROM owed_settle_delivered_batch(
        (SELECT jsonb_agg(jsonb_build_object('idx', r.idx, 'tenant_id', r.tenant_id, 'id', r.id,
                                             'claim_seq', r.claim_seq, 'provider', r.provider,
                                             'started_at', r.started_at, 'message_id', r.message_id,
                                             'http_status', r.http_status,
                                             'possible_duplicate', r.possible_duplicate))
           FROM unnest(p_idx, p_tenant, p_id, p_claim_seq, p_provider, p_started, p_message_id, p_http_status,
                       p_possible_duplicate)
             AS r(idx, tenant_id, id, claim_seq, provider, started_at, message_id, http_status,
                  possible_duplicate)),
        p_now);
END
$$;
