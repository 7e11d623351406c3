-- The worker's claim: a queue message arrives and the worker takes the row
-- it names, in the row's tenant scope. The claim functions are SECURITY
-- INVOKER (the default), so row-level security applies to the caller as to
-- the statements they wrap, and set_config(..., true) is local to the
-- caller's transaction. internal/ledger is their only caller, and its Go
-- side (claim.go, decide) reads the row the claim returns.

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

-- owed_claim_batch claims many rows, possibly of many tenants, in one
-- statement and one commit (one WAL flush instead of one per row): each
-- row through owed_claim under its own tenant's scope, so row-level
-- security still sees one tenant per statement. Rows are taken in id
-- order, so two batches that touch the same rows lock them in the same
-- order and cannot deadlock. The worker calls owed_claim_batch_marked; this
-- stays for the release before it.
CREATE FUNCTION owed_claim_batch(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
                                 p_latest_due timestamptz)
RETURNS TABLE (idx integer, id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               claim_seq bigint, took boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(idx integer, tenant_id text, id bigint, due_at timestamptz)
             ORDER BY x.id, x.idx
    LOOP
        RETURN QUERY SELECT r.idx, c.* FROM owed_claim(r.tenant_id, r.id, p_now, p_lease_until, r.due_at, p_latest_due) c;
    END LOOP;
END
$$;

-- owed_claim_batch_marked is owed_claim_batch with each taken row's
-- undeliverable mark (owed_undeliverable: its recipient on its channel in
-- its tenant) beside it, so the worker reads the mark in the claim's
-- statement and commit instead of one more transaction per delivery. The
-- worker uses the mark when the row's recipient is the address it sends to,
-- and looks a resolved address up itself when a resolver maps it to
-- another. The scope is set before each row's query, so both owed_claim and
-- the mark's read see that row's tenant alone. A row's revocable (absent:
-- false) is owed_claim's p_revocable.
CREATE FUNCTION owed_claim_batch_marked(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
                                        p_latest_due timestamptz)
RETURNS TABLE (idx integer, id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
               claim_seq bigint, took boolean, mark_provider text, mark_code text, mark_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(idx integer, tenant_id text, id bigint, due_at timestamptz,
                                                            revocable boolean)
             ORDER BY x.id, x.idx
    LOOP
        PERFORM set_config('owed.tenant_id', r.tenant_id, true);
        RETURN QUERY
        SELECT r.idx, c.*, u.provider, u.code, u.marked_at
          FROM owed_claim(r.tenant_id, r.id, p_now, p_lease_until, r.due_at, p_latest_due,
                          coalesce(r.revocable, false)) c
          LEFT JOIN owed_undeliverable u
            ON c.took AND u.tenant_id = c.tenant_id AND u.channel = c.channel AND u.address = c.recipient;
    END LOOP;
END
$$;

-- owed_extend_claims is the heartbeat of many claims, possibly of many
-- tenants, in one statement and one commit: each row's lease moves to
-- p_lease_until (never back) while the row is still sending under the
-- token its worker holds, so a claim stays the worker's as long as the
-- worker is alive, however long its resolve, pace wait or send takes. held
-- says whether it was; a row not visible in its tenant's scope is not held.
--
-- A row with start_send is the worker's check right before its send: the
-- claim stops being revocable (owed_claim's p_revocable), so a cancel or
-- reschedule from now on waits on the send as an intent, and claimed_at
-- marks that this send may reach the provider. The check and a cancel lock
-- the row, so one of them comes first: a claim the cancel revoked is not
-- held, and its worker never sends.
CREATE FUNCTION owed_extend_claims(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz)
RETURNS TABLE (idx integer, held boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(idx integer, tenant_id text, id bigint, claim_seq bigint,
                                                            start_send boolean)
             ORDER BY x.id, x.idx
    LOOP
        PERFORM set_config('owed.tenant_id', r.tenant_id, true);
        IF r.start_send THEN
            UPDATE owed_notifications n
               SET lease_until = greatest(n.lease_until, p_lease_until), claim_revocable = false,
                   claimed_at = CASE WHEN n.claim_revocable THEN p_now ELSE n.claimed_at END,
                   updated_at = p_now
             WHERE n.id = r.id AND n.state = 'sending' AND n.claim_seq = r.claim_seq;
        ELSE
            UPDATE owed_notifications n
               SET lease_until = greatest(n.lease_until, p_lease_until)
             WHERE n.id = r.id AND n.state = 'sending' AND n.claim_seq = r.claim_seq;
        END IF;
        idx := r.idx;
        held := FOUND;
        RETURN NEXT;
    END LOOP;
END
$$;
