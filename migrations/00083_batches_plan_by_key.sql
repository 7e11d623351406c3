-- The worker's batch statements (owed_claim_many, owed_extend_many,
-- owed_settle_delivered_many) read the ledger only by the key of their
-- batch's rows, and are planned once per session: hash and merge joins and
-- sequential and bitmap scans are off for their calls, and their plans are
-- generic. PostgreSQL prices a probe of the key once per month partition
-- (all but one are skipped when the statement runs), so it often read
-- every row of the batch's tenants through the tenant index and hashed
-- them, or every row in flight (owed_extend_many, whose test of the hold
-- moves onto the row locked), and it planned each call of the claim and
-- the settle again. Their answers come from their CTEs by jsonb objects
-- keyed by id, not by joins of two CTEs (migration 00084 takes the join
-- out of the counters' trigger they fire). internal/ledger/sql/claim.sql
-- says more. Same signatures, same answers.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_claim_many(p_idx integer[], p_tenant text[], p_id bigint[], p_due timestamptz[],
                                p_revocable boolean, p_now timestamptz, p_lease_until timestamptz,
                                p_latest_due timestamptz)
RETURNS SETOF owed_claimed
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_hashjoin = off SET enable_mergejoin = off
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_out owed_claimed[];
    v_lapsed integer[];
    v owed_claimed;
    i integer;
BEGIN
    IF cardinality(p_id) = (SELECT count(DISTINCT x) FROM unnest(p_id) x) THEN
        BEGIN
            PERFORM set_config('owed.tenant_ids', (SELECT array_agg(DISTINCT t) FROM unnest(p_tenant) t)::text, true);
            WITH req AS (
                SELECT * FROM unnest(p_idx, p_tenant, p_id, p_due) AS r(idx, tenant_id, id, due_at)
            ), cur AS (
                -- FOR UPDATE above the sort: the rows are locked in id order.
                SELECT n.*, r.idx, r.due_at AS want_due,
                       (n.state = 'sending' AND n.lease_until <= p_now AND n.intent IS NOT NULL
                        AND n.intent_outcome IS NULL) AS lapsed_intent
                  FROM owed_notifications n JOIN req r ON n.id = r.id AND n.tenant_id = r.tenant_id
                 ORDER BY n.id
                   FOR UPDATE OF n
            ), taken AS (
                -- owed_claim's conditions, row for row.
                UPDATE owed_notifications n
                   SET state = 'sending', lease_until = p_lease_until, updated_at = p_now,
                       claimed_at = CASE WHEN p_revocable THEN n.claimed_at ELSE p_now END,
                       claim_revocable = p_revocable, claim_seq = n.claim_seq + 1
                  FROM cur
                 WHERE n.id = cur.id
                   AND NOT cur.lapsed_intent
                   AND cur.settled_at IS NULL
                   AND cur.due_at = cur.want_due
                   AND (cur.expires_at IS NULL OR cur.expires_at > p_now)
                   AND (cur.state <> 'sending' OR cur.lease_until <= p_now)
                   AND cur.due_at <= p_latest_due
                RETURNING n.id, n.claim_seq
            ), took AS MATERIALIZED (
                -- The tokens taken, by id, for the answers below: a join of
                -- the two CTEs is planned on the generic plan's guess of
                -- their sizes (ten rows), and a nested loop over a batch of
                -- a thousand compares a million pairs.
                SELECT jsonb_object_agg(id::text, claim_seq) AS seq FROM taken
            ), ans AS (
                SELECT cur.*, (k.seq ->> cur.id::text)::bigint AS new_seq
                  FROM cur CROSS JOIN took k
            )
            SELECT array_agg(ROW(cur.idx, cur.id, cur.tenant_id, cur.recipient, cur.channel, cur.kind, cur.ref_id,
                                 cur.due_at, cur.expires_at,
                                 coalesce(cur.payload, (SELECT p.payload FROM owed_event_payloads p
                                                         WHERE p.tenant_id = cur.tenant_id AND p.id = cur.payload_id)),
                                 cur.state, cur.attempts, cur.lease_until, cur.claimed_at, cur.published_at,
                                 cur.delivered_at, cur.settled_at, cur.provider, cur.provider_message_id,
                                 cur.last_error, cur.created_at, cur.updated_at, cur.queue_generation,
                                 coalesce(cur.new_seq, cur.claim_seq), cur.new_seq IS NOT NULL,
                                 u.provider, u.code, u.marked_at)::owed_claimed) FILTER (WHERE NOT cur.lapsed_intent),
                   array_agg(cur.idx) FILTER (WHERE cur.lapsed_intent)
              INTO v_out, v_lapsed
              FROM ans cur
              LEFT JOIN owed_undeliverable u
                ON cur.new_seq IS NOT NULL AND u.tenant_id = cur.tenant_id AND u.channel = cur.channel
               AND u.address = cur.recipient;
            -- The rows whose lapsed claim has an intent waiting, each as
            -- owed_claim takes it (handed back, the intent applied, then
            -- judged), in its own tenant's scope alone. They are locked
            -- already.
            PERFORM set_config('owed.tenant_ids', '', true);
            FOR i IN SELECT array_position(p_idx, x) FROM unnest(v_lapsed) x LOOP
                PERFORM set_config('owed.tenant_id', p_tenant[i], true);
                SELECT * INTO v FROM owed_claim_marked(p_idx[i], p_tenant[i], p_id[i], p_now, p_lease_until,
                                                       p_due[i], p_latest_due, p_revocable);
                IF v.id IS NOT NULL THEN
                    v_out := array_append(v_out, v);
                END IF;
            END LOOP;
            RETURN QUERY SELECT * FROM unnest(v_out);
            RETURN;
        EXCEPTION WHEN OTHERS THEN
            IF NOT owed_batch_row_error(SQLSTATE) THEN
                RAISE;
            END IF;
        END;
    END IF;
    RETURN QUERY
    SELECT * FROM owed_claim_rows(
        (SELECT jsonb_agg(jsonb_build_object('idx', r.idx, 'tenant_id', r.tenant_id, 'id', r.id, 'due_at', r.due_at,
                                             'revocable', p_revocable))
           FROM unnest(p_idx, p_tenant, p_id, p_due) AS r(idx, tenant_id, id, due_at)),
        p_now, p_lease_until, p_latest_due);
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_extend_many(p_idx integer[], p_tenant text[], p_id bigint[], p_claim_seq bigint[],
                                 p_start_send boolean, p_now timestamptz, p_lease_until timestamptz,
                                 p_keep_until timestamptz)
RETURNS TABLE (idx integer, held boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_hashjoin = off SET enable_mergejoin = off
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
#variable_conflict use_column
DECLARE
    v_idx integer[];
    v_held boolean[];
BEGIN
    IF cardinality(p_id) = (SELECT count(DISTINCT x) FROM unnest(p_id) x) THEN
        BEGIN
            PERFORM set_config('owed.tenant_ids', (SELECT array_agg(DISTINCT t) FROM unnest(p_tenant) t)::text, true);
            WITH req AS (
                SELECT * FROM unnest(p_idx, p_tenant, p_id, p_claim_seq) AS r(idx, tenant_id, id, claim_seq)
            ), locked AS (
                -- The batch's rows by key alone, the hold tested on the
                -- row locked: a test of the state here let the planner read
                -- every row in flight (owed_notifications_in_flight).
                SELECT n.id, r.idx, n.state = 'sending' AND n.claim_seq = r.claim_seq AS held
                  FROM owed_notifications n JOIN req r ON n.id = r.id AND n.tenant_id = r.tenant_id
                 ORDER BY n.id
                   FOR UPDATE OF n
            ), extended AS (
                UPDATE owed_notifications n
                   SET lease_until = CASE WHEN n.lease_until >= p_keep_until THEN n.lease_until
                                          ELSE greatest(n.lease_until, p_lease_until) END,
                       claim_revocable = n.claim_revocable AND NOT p_start_send,
                       claimed_at = CASE WHEN p_start_send AND n.claim_revocable THEN p_now ELSE n.claimed_at END,
                       updated_at = CASE WHEN p_start_send THEN p_now ELSE n.updated_at END
                  FROM locked l
                 WHERE n.id = l.id AND l.held
                RETURNING l.idx
            ), done AS MATERIALIZED (
                -- The holds extended, by idx (a join of the two CTEs would
                -- be a nested loop over a batch: owed_claim_many says why).
                SELECT jsonb_object_agg(idx::text, true) AS held FROM extended
            )
            SELECT array_agg(r.idx), array_agg(coalesce(e.held ? r.idx::text, false))
              INTO v_idx, v_held
              FROM req r CROSS JOIN done e;
            RETURN QUERY SELECT * FROM unnest(v_idx, v_held);
            RETURN;
        EXCEPTION WHEN OTHERS THEN
            IF NOT owed_batch_row_error(SQLSTATE) THEN
                RAISE;
            END IF;
        END;
    END IF;
    RETURN QUERY
    SELECT * FROM owed_extend_claims(
        (SELECT jsonb_agg(jsonb_build_object('idx', r.idx, 'tenant_id', r.tenant_id, 'id', r.id,
                                             'claim_seq', r.claim_seq, 'start_send', p_start_send))
           FROM unnest(p_idx, p_tenant, p_id, p_claim_seq) AS r(idx, tenant_id, id, claim_seq)),
        p_now, p_lease_until);
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_settle_delivered_many(p_idx integer[], p_tenant text[], p_id bigint[], p_claim_seq bigint[],
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
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_claim_many(p_idx integer[], p_tenant text[], p_id bigint[], p_due timestamptz[],
                                p_revocable boolean, p_now timestamptz, p_lease_until timestamptz,
                                p_latest_due timestamptz)
RETURNS SETOF owed_claimed
LANGUAGE plpgsql AS $$
DECLARE
    v_out owed_claimed[];
    v_lapsed integer[];
    v owed_claimed;
    i integer;
BEGIN
    IF cardinality(p_id) = (SELECT count(DISTINCT x) FROM unnest(p_id) x) THEN
        BEGIN
            PERFORM set_config('owed.tenant_ids', (SELECT array_agg(DISTINCT t) FROM unnest(p_tenant) t)::text, true);
            WITH req AS (
                SELECT * FROM unnest(p_idx, p_tenant, p_id, p_due) AS r(idx, tenant_id, id, due_at)
            ), cur AS (
                -- FOR UPDATE above the sort: the rows are locked in id order.
                SELECT n.*, r.idx, r.due_at AS want_due,
                       (n.state = 'sending' AND n.lease_until <= p_now AND n.intent IS NOT NULL
                        AND n.intent_outcome IS NULL) AS lapsed_intent
                  FROM owed_notifications n JOIN req r ON n.id = r.id AND n.tenant_id = r.tenant_id
                 ORDER BY n.id
                   FOR UPDATE OF n
            ), taken AS (
                -- owed_claim's conditions, row for row.
                UPDATE owed_notifications n
                   SET state = 'sending', lease_until = p_lease_until, updated_at = p_now,
                       claimed_at = CASE WHEN p_revocable THEN n.claimed_at ELSE p_now END,
                       claim_revocable = p_revocable, claim_seq = n.claim_seq + 1
                  FROM cur
                 WHERE n.id = cur.id
                   AND NOT cur.lapsed_intent
                   AND cur.settled_at IS NULL
                   AND cur.due_at = cur.want_due
                   AND (cur.expires_at IS NULL OR cur.expires_at > p_now)
                   AND (cur.state <> 'sending' OR cur.lease_until <= p_now)
                   AND cur.due_at <= p_latest_due
                RETURNING n.id, n.claim_seq
            )
            SELECT array_agg(ROW(cur.idx, cur.id, cur.tenant_id, cur.recipient, cur.channel, cur.kind, cur.ref_id,
                                 cur.due_at, cur.expires_at,
                                 coalesce(cur.payload, (SELECT p.payload FROM owed_event_payloads p
                                                         WHERE p.tenant_id = cur.tenant_id AND p.id = cur.payload_id)),
                                 cur.state, cur.attempts, cur.lease_until, cur.claimed_at, cur.published_at,
                                 cur.delivered_at, cur.settled_at, cur.provider, cur.provider_message_id,
                                 cur.last_error, cur.created_at, cur.updated_at, cur.queue_generation,
                                 coalesce(t.claim_seq, cur.claim_seq), t.id IS NOT NULL,
                                 u.provider, u.code, u.marked_at)::owed_claimed) FILTER (WHERE NOT cur.lapsed_intent),
                   array_agg(cur.idx) FILTER (WHERE cur.lapsed_intent)
              INTO v_out, v_lapsed
              FROM cur
              LEFT JOIN taken t ON t.id = cur.id
              LEFT JOIN owed_undeliverable u
                ON t.id IS NOT NULL AND u.tenant_id = cur.tenant_id AND u.channel = cur.channel
               AND u.address = cur.recipient;
            -- The rows whose lapsed claim has an intent waiting, each as
            -- owed_claim takes it (handed back, the intent applied, then
            -- judged), in its own tenant's scope alone. They are locked
            -- already.
            PERFORM set_config('owed.tenant_ids', '', true);
            FOR i IN SELECT array_position(p_idx, x) FROM unnest(v_lapsed) x LOOP
                PERFORM set_config('owed.tenant_id', p_tenant[i], true);
                SELECT * INTO v FROM owed_claim_marked(p_idx[i], p_tenant[i], p_id[i], p_now, p_lease_until,
                                                       p_due[i], p_latest_due, p_revocable);
                IF v.id IS NOT NULL THEN
                    v_out := array_append(v_out, v);
                END IF;
            END LOOP;
            RETURN QUERY SELECT * FROM unnest(v_out);
            RETURN;
        EXCEPTION WHEN OTHERS THEN
            IF NOT owed_batch_row_error(SQLSTATE) THEN
                RAISE;
            END IF;
        END;
    END IF;
    RETURN QUERY
    SELECT * FROM owed_claim_rows(
        (SELECT jsonb_agg(jsonb_build_object('idx', r.idx, 'tenant_id', r.tenant_id, 'id', r.id, 'due_at', r.due_at,
                                             'revocable', p_revocable))
           FROM unnest(p_idx, p_tenant, p_id, p_due) AS r(idx, tenant_id, id, due_at)),
        p_now, p_lease_until, p_latest_due);
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_extend_many(p_idx integer[], p_tenant text[], p_id bigint[], p_claim_seq bigint[],
                                 p_start_send boolean, p_now timestamptz, p_lease_until timestamptz,
                                 p_keep_until timestamptz)
RETURNS TABLE (idx integer, held boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_idx integer[];
    v_held boolean[];
BEGIN
    IF cardinality(p_id) = (SELECT count(DISTINCT x) FROM unnest(p_id) x) THEN
        BEGIN
            PERFORM set_config('owed.tenant_ids', (SELECT array_agg(DISTINCT t) FROM unnest(p_tenant) t)::text, true);
            WITH req AS (
                SELECT * FROM unnest(p_idx, p_tenant, p_id, p_claim_seq) AS r(idx, tenant_id, id, claim_seq)
            ), locked AS (
                SELECT n.id, r.idx
                  FROM owed_notifications n JOIN req r ON n.id = r.id AND n.tenant_id = r.tenant_id
                 WHERE n.state = 'sending' AND n.claim_seq = r.claim_seq
                 ORDER BY n.id
                   FOR UPDATE OF n
            ), extended AS (
                UPDATE owed_notifications n
                   SET lease_until = CASE WHEN n.lease_until >= p_keep_until THEN n.lease_until
                                          ELSE greatest(n.lease_until, p_lease_until) END,
                       claim_revocable = n.claim_revocable AND NOT p_start_send,
                       claimed_at = CASE WHEN p_start_send AND n.claim_revocable THEN p_now ELSE n.claimed_at END,
                       updated_at = CASE WHEN p_start_send THEN p_now ELSE n.updated_at END
                  FROM locked l
                 WHERE n.id = l.id
                RETURNING l.idx
            )
            SELECT array_agg(r.idx), array_agg(e.idx IS NOT NULL)
              INTO v_idx, v_held
              FROM req r LEFT JOIN extended e ON e.idx = r.idx;
            RETURN QUERY SELECT * FROM unnest(v_idx, v_held);
            RETURN;
        EXCEPTION WHEN OTHERS THEN
            IF NOT owed_batch_row_error(SQLSTATE) THEN
                RAISE;
            END IF;
        END;
    END IF;
    RETURN QUERY
    SELECT * FROM owed_extend_claims(
        (SELECT jsonb_agg(jsonb_build_object('idx', r.idx, 'tenant_id', r.tenant_id, 'id', r.id,
                                             'claim_seq', r.claim_seq, 'start_send', p_start_send))
           FROM unnest(p_idx, p_tenant, p_id, p_claim_seq) AS r(idx, tenant_id, id, claim_seq)),
        p_now, p_lease_until);
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_settle_delivered_many(p_idx integer[], p_tenant text[], p_id bigint[], p_claim_seq bigint[],
                                           p_provider text[], p_started timestamptz[], p_message_id text[],
                                           p_http_status integer[], p_possible_duplicate boolean[],
                                           p_now timestamptz)
RETURNS TABLE (idx integer, changed boolean, held_elsewhere boolean, set_aside text)
LANGUAGE plpgsql AS $$
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
            )
            SELECT array_agg(r.idx), array_agg(s.stamp), array_agg(s.held_elsewhere)
              INTO v_idx, v_changed, v_elsewhere
              FROM req r LEFT JOIN settled s ON s.idx = r.idx;
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
-- +goose StatementEnd
