-- The worker's claim: a queue message arrives and the worker takes the row
-- it names, in the row's tenant scope. The claim functions are SECURITY
-- INVOKER (the default), so row-level security applies to the caller as to
-- the statements they wrap, and set_config(..., true) is local to the
-- caller's transaction. internal/ledger is their only caller (queries.sql),
-- and its Go side (claim.go, decide) reads the row the claim returns.

-- owed_claim takes one row for a send, and returns the row as it was
-- before the claim (its payload read through owed_event_payloads when it
-- is shared) with took, and the claim's new token in claim_seq when it
-- took the row. It takes the row only when it is still owed (failed is as
-- final as delivered until ledger.Redrive reopens it), the message is for
-- the row's current due time (p_due), the row has not expired, no live
-- claim holds it, and it is due by p_latest_due. A claim that lapsed with
-- an intent waiting (its worker died or stalled mid-send after a cancel or
-- reschedule landed) is handed back first, as the lost worker's release
-- would have, so owed_apply_intent applies it before the claim decides:
-- the claim then finds the row cancelled or moved and sends nothing the
-- caller was told would not be sent. claimed_at stays, so a send after a
-- reschedule is still flagged a possible duplicate.
--
-- p_revocable makes the claim revocable until its worker starts the send
-- (owed_extend_claims with start_send, the worker's check before the send):
-- a cancel or reschedule that lands meanwhile takes the row back from the
-- claim (ledger.Cancel, ledger.Reschedule) instead of waiting on the send as
-- an intent, and the check then refuses, so nothing the caller was told is
-- cancelled is ever sent. A revocable claim leaves claimed_at as it was: the
-- mark that a send may already have reached the provider is stamped when the
-- send starts, since a claim revoked or lost before that sent nothing. The
-- previous release's claims pass no p_revocable and are as before.
CREATE FUNCTION owed_claim(p_tenant text, p_id bigint, p_now timestamptz, p_lease_until timestamptz,
                           p_due timestamptz, p_latest_due timestamptz, p_revocable boolean DEFAULT false)
RETURNS TABLE (id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               claim_seq bigint, took boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    -- A claim lapsed with an intent waiting (its worker died or stalled
    -- mid-send after a cancel or reschedule landed): hand the row back
    -- first, as the lost worker's release would have, so the intent
    -- trigger applies it. The claim below then finds the row cancelled
    -- (settled) or moved (stale) and sends nothing the caller was told
    -- would not be sent. claimed_at stays, so a send after a reschedule is
    -- still flagged a possible duplicate.
    UPDATE owed_notifications n
       SET state = 'queued', lease_until = p_now, updated_at = p_now
     WHERE n.id = p_id AND n.state = 'sending' AND n.lease_until <= p_now
       AND n.intent IS NOT NULL AND n.intent_outcome IS NULL;
    RETURN QUERY
    WITH cur AS (
        SELECT n.* FROM owed_notifications n WHERE n.id = p_id FOR UPDATE
    ), taken AS (
        -- Only an unsettled row is taken: failed is as final as delivered
        -- until ledger.Redrive reopens it. Each claim that takes the row
        -- moves its token on.
        UPDATE owed_notifications n
           SET state = 'sending', lease_until = p_lease_until, updated_at = p_now,
               claimed_at = CASE WHEN p_revocable THEN n.claimed_at ELSE p_now END,
               claim_revocable = p_revocable, claim_seq = n.claim_seq + 1
          FROM cur
         WHERE n.id = cur.id
           AND cur.settled_at IS NULL
           AND cur.due_at = p_due
           AND (cur.expires_at IS NULL OR cur.expires_at > p_now)
           AND (cur.state <> 'sending' OR cur.lease_until <= p_now)
           AND cur.due_at <= p_latest_due
        RETURNING n.id, n.claim_seq
    )
    -- The row as it was before the claim, except claim_seq: the new token
    -- when the claim took the row.
    SELECT cur.id, cur.tenant_id, cur.recipient, cur.channel, cur.kind, cur.ref_id, cur.due_at,
           cur.expires_at, coalesce(cur.payload, (SELECT p.payload FROM owed_event_payloads p
                                   WHERE p.tenant_id = cur.tenant_id AND p.id = cur.payload_id)), cur.state, cur.attempts, cur.lease_until, cur.claimed_at,
           cur.published_at, cur.delivered_at, cur.settled_at, cur.provider, cur.provider_message_id,
           cur.last_error, cur.created_at, cur.updated_at, cur.queue_generation,
           coalesce((SELECT t.claim_seq FROM taken t), cur.claim_seq), EXISTS (SELECT 1 FROM taken)
      FROM cur;
END
$$;

-- A batch statement never fails because of one row (issue 25: one row whose
-- intent could not be applied failed every claim, settle, requeue and
-- expiry pass that touched it, for every tenant). Each batch function runs
-- its rows in one block first, which costs one subtransaction per batch;
-- should a row raise an error its data explains (owed_batch_row_error), the
-- block is rolled back and the rows run again, each in a block of its own,
-- so every row that can be applied is, and the one that cannot is set aside
-- alone with the reason. Errors of the transaction as a whole (a deadlock,
-- a cancelled statement, a lost connection) still fail the batch, which its
-- caller retries. The answers are gathered and returned after the blocks:
-- a row returned from inside a block that is then rolled back would still
-- be returned.

-- owed_batch_row_error says whether an error (its SQLSTATE) is one a row's
-- data explains, which a batch sets aside with the row: classes 22 (data
-- exception), 23 (integrity constraint), P0 (raised in PL/pgSQL, a
-- trigger's) and 42501 (a row-level security check).
CREATE FUNCTION owed_batch_row_error(p_sqlstate text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT left(p_sqlstate, 2) IN ('22', '23', 'P0') OR p_sqlstate = '42501'
$$;

-- owed_set_aside settles one owed row a batch could not apply, alone, with
-- the reason: failed (a copy of its message is acked as a settled row's,
-- and an operator may redrive it), or cancelled when a cancel was waiting
-- on its send, since the cancel came first; a reschedule waiting there is
-- refused. A settled row is left as it is. It answers whether it could;
-- when even this fails the row is left untouched.
CREATE FUNCTION owed_set_aside(p_tenant text, p_id bigint, p_reason text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    UPDATE owed_notifications n
       SET state = CASE WHEN n.intent = 'cancel' AND n.intent_outcome IS NULL THEN 'cancelled' ELSE 'failed' END,
           intent_outcome = CASE WHEN n.intent IS NULL OR n.intent_outcome IS NOT NULL THEN n.intent_outcome
                                 WHEN n.intent = 'cancel' THEN 'applied' ELSE 'refused' END,
           settled_at = p_now, lease_until = NULL, updated_at = p_now,
           last_error = 'set aside: ' || p_reason
     WHERE n.id = p_id AND n.settled_at IS NULL;
    RETURN true;
EXCEPTION WHEN OTHERS THEN
    IF NOT owed_batch_row_error(SQLSTATE) THEN
        RAISE;
    END IF;
    RETURN false;
END
$$;

-- owed_claimed is one answer of the claim batches: owed_claim's row with its
-- place in the batch and its recipient's undeliverable mark.
CREATE TYPE owed_claimed AS (
    idx integer, id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
    due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
    lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
    delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
    last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
    claim_seq bigint, took boolean, mark_provider text, mark_code text, mark_at timestamptz);

-- owed_claim_marked is one row's claim (owed_claim) with the undeliverable
-- mark of the recipient of a row it took (owed_undeliverable: its recipient
-- on its channel in its tenant), so the worker reads the mark in the
-- claim's statement and commit instead of one more transaction per
-- delivery. The caller sets the row's tenant scope first, so both the claim
-- and the mark's read see that tenant alone.
CREATE FUNCTION owed_claim_marked(p_idx integer, p_tenant text, p_id bigint, p_now timestamptz,
                                  p_lease_until timestamptz, p_due timestamptz, p_latest_due timestamptz,
                                  p_revocable boolean)
RETURNS SETOF owed_claimed
LANGUAGE sql AS $$
SELECT p_idx, c.*, u.provider, u.code, u.marked_at
  FROM owed_claim(p_tenant, p_id, p_now, p_lease_until, p_due, p_latest_due, p_revocable) c
  LEFT JOIN owed_undeliverable u
    ON c.took AND u.tenant_id = c.tenant_id AND u.channel = c.channel AND u.address = c.recipient
$$;

-- owed_claim_rows claims the rows of p_rows, possibly of many tenants, in
-- one statement, each through owed_claim_marked in its own tenant's scope.
-- Rows are taken in id order, so two batches that touch the same rows lock
-- them in the same order and cannot deadlock. A row's revocable (absent:
-- false) is owed_claim's p_revocable; a row not visible in its tenant's
-- scope has no answer. A row the claim cannot apply is set aside
-- (owed_set_aside) and answered as it is then: settled, not taken, so its
-- worker acks the message and sends nothing.
CREATE FUNCTION owed_claim_rows(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
                                p_latest_due timestamptz)
RETURNS SETOF owed_claimed
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v owed_claimed;
    v_out owed_claimed[];
    alone boolean := false;
BEGIN
    LOOP
        BEGIN
            v_out := '{}';
            FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(idx integer, tenant_id text, id bigint,
                                                                    due_at timestamptz, revocable boolean)
                     ORDER BY x.id, x.idx
            LOOP
                PERFORM set_config('owed.tenant_id', r.tenant_id, true);
                IF NOT alone THEN
                    SELECT * INTO v FROM owed_claim_marked(r.idx, r.tenant_id, r.id, p_now, p_lease_until, r.due_at,
                                                           p_latest_due, coalesce(r.revocable, false));
                ELSE
                    BEGIN
                        SELECT * INTO v FROM owed_claim_marked(r.idx, r.tenant_id, r.id, p_now, p_lease_until,
                                                               r.due_at, p_latest_due, coalesce(r.revocable, false));
                    EXCEPTION WHEN OTHERS THEN
                        IF NOT owed_batch_row_error(SQLSTATE) THEN
                            RAISE;
                        END IF;
                        PERFORM owed_set_aside(r.tenant_id, r.id, 'the claim could not take the row: ' || SQLERRM,
                                               p_now);
                        SELECT r.idx, n.id, n.tenant_id, n.recipient, n.channel, n.kind, n.ref_id, n.due_at,
                               n.expires_at, coalesce(n.payload, (SELECT p.payload FROM owed_event_payloads p
                                                                   WHERE p.tenant_id = n.tenant_id
                                                                     AND p.id = n.payload_id)),
                               n.state, n.attempts, n.lease_until, n.claimed_at, n.published_at, n.delivered_at,
                               n.settled_at, n.provider, n.provider_message_id, n.last_error, n.created_at,
                               n.updated_at, n.queue_generation, n.claim_seq, false, NULL, NULL, NULL
                          INTO v
                          FROM owed_notifications n WHERE n.id = r.id;
                    END;
                END IF;
                IF v.id IS NOT NULL THEN
                    v_out := array_append(v_out, v);
                END IF;
            END LOOP;
            EXIT;
        EXCEPTION WHEN OTHERS THEN
            IF alone OR NOT owed_batch_row_error(SQLSTATE) THEN
                RAISE;
            END IF;
            alone := true;
        END;
    END LOOP;
    RETURN QUERY SELECT * FROM unnest(v_out);
END
$$;

-- owed_claim_batch claims many rows, possibly of many tenants, in one
-- statement and one commit (one WAL flush instead of one per row), through
-- owed_claim_rows. The worker calls owed_claim_batch_marked; this stays for
-- the release before it.
CREATE FUNCTION owed_claim_batch(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
                                 p_latest_due timestamptz)
RETURNS TABLE (idx integer, id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               claim_seq bigint, took boolean)
LANGUAGE sql AS $$
SELECT c.idx, c.id, c.tenant_id, c.recipient, c.channel, c.kind, c.ref_id, c.due_at, c.expires_at, c.payload,
       c.state, c.attempts, c.lease_until, c.claimed_at, c.published_at, c.delivered_at, c.settled_at,
       c.provider, c.provider_message_id, c.last_error, c.created_at, c.updated_at, c.queue_generation,
       c.claim_seq, c.took
  FROM owed_claim_rows(p_rows, p_now, p_lease_until, p_latest_due) c
$$;

-- owed_claim_batch_marked is the worker's claim of many rows: owed_claim_batch
-- with each taken row's undeliverable mark beside it (owed_claim_marked).
CREATE FUNCTION owed_claim_batch_marked(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
                                        p_latest_due timestamptz)
RETURNS TABLE (idx integer, id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               claim_seq bigint, took boolean, mark_provider text, mark_code text, mark_at timestamptz)
LANGUAGE sql AS $$
SELECT * FROM owed_claim_rows(p_rows, p_now, p_lease_until, p_latest_due)
$$;

-- owed_claim_many is the worker's claim of many rows, possibly of many
-- tenants: owed_claim_batch_marked's answers from one set-based statement
-- instead of one owed_claim per row. The rows come as arrays (idx, tenant,
-- id and due time, one element per message) and the scope is every tenant
-- they name (owed.tenant_ids, owed_tenant_scope), each row matched with
-- the tenant its message named. The statement locks the rows in id order,
-- as every batch does, and takes each one owed_claim would take, under the
-- same conditions, as one UPDATE; the undeliverable marks of the rows taken
-- come in the same plan. Revocable is one value for the whole batch: the
-- worker's claims are all revocable.
--
-- Three cases keep owed_claim's rules by running it, row by row, since they
-- are rare and their order matters: a batch naming one row twice (the
-- second claim must see the first), a row whose lapsed claim has an intent
-- waiting (owed_claim hands it back first, and the intent trigger must run
-- before the claim decides; the statement leaves such rows for that), and a
-- row that raises an error its data explains, after which the whole batch
-- runs through owed_claim_rows, which sets that row aside alone.
--
-- How it is planned (its SET clauses, for every statement of the call and
-- the triggers it fires, but the counters', which set their own): its
-- plans are generic, made once per session, and read the ledger only by
-- the key of the batch's rows. PostgreSQL prices a probe of the key once
-- per month partition, not knowing that all but one are skipped when the
-- statement runs, so it often read every row of the batch's tenants
-- through the tenant index and hashed them, or read a partition once and
-- tested each row against the batch: 2,000 rows for a batch of five
-- (TestWorkerBatchesReadTheirRowsByKey), 20,000 for a claim of 26 in
-- bench/e2e, 20,333 for a claim of 1,000 on bench/ledgerscale's 1M ledger.
-- With hash and merge joins and sequential and bitmap scans off, a probe
-- of the key is the one way left. Planned again at each call, a claim or
-- settle of five rows spent 3.4 to 5.1 ms planning. What the statement
-- answers per row comes from its own CTEs by a jsonb object keyed by id
-- (took), never a join of two CTEs: the generic plan guesses ten rows for
-- each, and its nested loop over a batch of a thousand compares a million
-- pairs.
CREATE FUNCTION owed_claim_many(p_idx integer[], p_tenant text[], p_id bigint[], p_due timestamptz[],
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

-- owed_extend_claim is the heartbeat of one claim, in the tenant scope its
-- caller set: the row's lease moves to p_lease_until (never back) while the
-- row is still sending under the token its worker holds (p_claim_seq), so a
-- claim stays the worker's as long as the worker is alive, however long its
-- resolve, pace wait or send takes. It answers whether the claim is held.
--
-- With p_start_send it is the worker's check right before its send: the
-- claim stops being revocable (owed_claim's p_revocable), so a cancel or
-- reschedule from now on waits on the send as an intent, and claimed_at
-- marks that this send may reach the provider. The check and a cancel lock
-- the row, so one of them comes first: a claim the cancel revoked is not
-- held, and its worker never sends.
CREATE FUNCTION owed_extend_claim(p_id bigint, p_claim_seq bigint, p_start_send boolean, p_now timestamptz,
                                  p_lease_until timestamptz)
RETURNS boolean
LANGUAGE sql AS $$
WITH held AS (
    UPDATE owed_notifications n
       SET lease_until = greatest(n.lease_until, p_lease_until),
           claim_revocable = n.claim_revocable AND NOT p_start_send,
           claimed_at = CASE WHEN p_start_send AND n.claim_revocable THEN p_now ELSE n.claimed_at END,
           updated_at = CASE WHEN p_start_send THEN p_now ELSE n.updated_at END
     WHERE n.id = p_id AND n.state = 'sending' AND n.claim_seq = p_claim_seq
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM held)
$$;

-- owed_extend_claims is owed_extend_claim for many claims, possibly of many
-- tenants, in one statement and one commit, each in its own tenant's scope,
-- in id order. held says whether each claim is held; a row not visible in
-- its tenant's scope is not held, and neither is one the statement could
-- not apply (it is left alone: its worker stops, and the row is taken back
-- when its lease runs out). A row's start_send (absent: false) is
-- owed_extend_claim's p_start_send.
CREATE FUNCTION owed_extend_claims(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz)
RETURNS TABLE (idx integer, held boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_idx integer[];
    v_held boolean[];
    v boolean;
    alone boolean := false;
BEGIN
    LOOP
        BEGIN
            v_idx := '{}';
            v_held := '{}';
            FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(idx integer, tenant_id text, id bigint,
                                                                    claim_seq bigint, start_send boolean)
                     ORDER BY x.id, x.idx
            LOOP
                PERFORM set_config('owed.tenant_id', r.tenant_id, true);
                IF NOT alone THEN
                    v := owed_extend_claim(r.id, r.claim_seq, coalesce(r.start_send, false), p_now, p_lease_until);
                ELSE
                    BEGIN
                        v := owed_extend_claim(r.id, r.claim_seq, coalesce(r.start_send, false), p_now,
                                               p_lease_until);
                    EXCEPTION WHEN OTHERS THEN
                        IF NOT owed_batch_row_error(SQLSTATE) THEN
                            RAISE;
                        END IF;
                        v := false;
                    END;
                END IF;
                v_idx := array_append(v_idx, r.idx);
                v_held := array_append(v_held, v);
            END LOOP;
            EXIT;
        EXCEPTION WHEN OTHERS THEN
            IF alone OR NOT owed_batch_row_error(SQLSTATE) THEN
                RAISE;
            END IF;
            alone := true;
        END;
    END LOOP;
    RETURN QUERY SELECT * FROM unnest(v_idx, v_held);
END
$$;

-- owed_extend_many is owed_extend_claims in one set-based statement: the
-- holds come as arrays (idx, tenant, id and claim token, one element per
-- claim), the scope is every tenant they name (owed_tenant_scope), each
-- row matched with the tenant its hold names, and the rows are locked in id
-- order. p_start_send is one value for the whole batch (the heartbeat's
-- batches and the checks before the sends are separate). held says whether
-- each claim is held, as owed_extend_claim says it. A batch naming one row
-- twice, or a row the statement cannot apply, runs through
-- owed_extend_claims instead, which answers such a row not held.
--
-- A lease that already runs to p_keep_until is left as it is; only a
-- shorter one moves to p_lease_until. The check before the send passes the
-- lease its send needs as p_keep_until, so the check right after a claim,
-- the common case, changes no indexed column (lease_until is in
-- owed_notifications_in_flight) and its update can be HOT; the heartbeat
-- passes p_lease_until and always extends.
--
-- It reads and plans as owed_claim_many does (above).
CREATE FUNCTION owed_extend_many(p_idx integer[], p_tenant text[], p_id bigint[], p_claim_seq bigint[],
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
