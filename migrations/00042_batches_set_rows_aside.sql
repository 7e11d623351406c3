-- No batch statement fails because of one row (issue 25). Before, one row
-- a statement could not apply (its waiting reschedule's check violation)
-- failed every claim and settle batch that touched it, for every tenant:
-- accepted sends of other rows went unrecorded and were sent again.
--
-- The worker's batches (owed_claim_batch_marked, owed_claim_batch for the
-- previous release, owed_extend_claims, owed_settle_delivered_batch) run
-- their rows in one block, one subtransaction per batch; when a row raises
-- an error its data explains (owed_batch_row_error), the rows run again,
-- each in a block of its own, and the one that cannot be applied is set
-- aside alone (owed_set_aside: settled failed, or cancelled when a cancel
-- waited on it, with the reason), while the rest commit. An accepted send
-- is recorded with the intent waiting on it refused before it is given up.
-- owed_apply_intent writes a reschedule's new row in a block of its own, so
-- a new row the ledger refuses refuses the reschedule instead of failing
-- the statement that ended the send (a settle, or the sweep's requeue).
--
-- owed_settle_delivered_batch answers a fourth column, set_aside, so it is
-- dropped and created again; the previous release names the three columns
-- it reads and is unaffected. Expand-only otherwise: the other functions
-- keep their signatures and answers.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_apply_intent() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ended_at timestamptz := NEW.updated_at;
BEGIN
    -- A statement that resolves the intent itself has the last word: a
    -- batch that sets the row aside because the intent cannot be applied
    -- (refused).
    IF NEW.intent_outcome IS NOT NULL THEN
        RETURN NEW;
    END IF;
    IF OLD.intent = 'cancel' THEN
        IF NEW.state IN ('delivered', 'skipped', 'expired') THEN
            NEW.intent_outcome := 'too_late';
            RETURN NEW;
        END IF;
        -- Handed back, taken back by the sweep, failed, or moved or
        -- cancelled directly after the claim ran out: the cancel came
        -- first, and it wins.
        NEW.last_error := CASE WHEN NEW.state = 'failed'
                               THEN 'cancelled; the send in flight failed: ' || coalesce(NEW.last_error, 'failed')
                               ELSE 'cancelled' END;
        NEW.state := 'cancelled';
        NEW.settled_at := coalesce(NEW.settled_at, ended_at);
        NEW.lease_until := NULL;
        NEW.intent_outcome := 'applied';
        RETURN NEW;
    END IF;

    -- A reschedule. Only ledger.Reschedule moves a row from sending to
    -- pending (the worker's release hands it back as queued, the sweep's
    -- lease takes it as leased), and only a cancel makes it cancelled.
    IF NEW.state IN ('pending', 'cancelled') THEN
        NEW.intent_outcome := 'superseded';
    ELSIF NEW.settled_at IS NOT NULL THEN
        -- The new row is written in a block of its own: the statement that
        -- ends the send may be a batch of many rows (a settle, the sweep's
        -- requeue), and a new row the ledger refuses must not fail it. The
        -- send's outcome stands, and the reschedule is refused with the
        -- reason. The block costs a subtransaction only here, on the rare
        -- send that ends with a reschedule waiting.
        BEGIN
            INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at,
                                            payload, payload_id, created_at, updated_at)
            VALUES (OLD.tenant_id, OLD.recipient, OLD.channel, OLD.kind, OLD.ref_id, OLD.intent_due_at,
                    OLD.intent_expires_at, OLD.payload, OLD.payload_id, ended_at, ended_at)
            ON CONFLICT ON CONSTRAINT owed_notifications_schedule_key DO NOTHING;
            NEW.intent_outcome := 'new_row';
        EXCEPTION WHEN data_exception OR integrity_constraint_violation OR plpgsql_error
                       OR insufficient_privilege THEN
            NEW.intent_outcome := 'refused';
            NEW.last_error := concat_ws('; ', NEW.last_error,
                                        'the reschedule waiting on the send was refused: ' || SQLERRM);
        END;
    ELSIF EXISTS (SELECT 1 FROM owed_notifications o
                   WHERE o.tenant_id = OLD.tenant_id AND o.recipient = OLD.recipient AND o.kind = OLD.kind
                     AND o.ref_id = OLD.ref_id AND o.due_at = OLD.intent_due_at AND o.id <> OLD.id) THEN
        -- A row for this recipient was scheduled at the new time after the
        -- intent was recorded: that row is the send the snooze asked for,
        -- and moving this one onto its key would fail the release.
        NEW.state := 'cancelled';
        NEW.settled_at := ended_at;
        NEW.lease_until := NULL;
        NEW.last_error := 'rescheduled onto a row already scheduled at that due time';
        NEW.intent_outcome := 'new_row';
    ELSE
        -- As qReschedule moves an open row: the new due time is a new
        -- provider idempotency key, so the message handed back (published
        -- for the old one) is stale to the claim, and the next publish gets
        -- a new queue generation. A row the sweep is taking back stays
        -- leased, so the sweep publishes it for the new due time; claimed_at
        -- stays as the release left it, so a send that may have reached the
        -- provider still marks the next one a possible duplicate.
        NEW.due_at := OLD.intent_due_at;
        NEW.expires_at := OLD.intent_expires_at;
        NEW.published_at := NULL;
        NEW.queue_generation := greatest(NEW.queue_generation, OLD.queue_generation + 1);
        IF NEW.state <> 'leased' THEN
            NEW.state := 'pending';
            NEW.lease_until := NULL;
        END IF;
        NEW.intent_outcome := 'applied';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_batch_row_error(p_sqlstate text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT left(p_sqlstate, 2) IN ('22', '23', 'P0') OR p_sqlstate = '42501'
$$;
-- +goose StatementEnd

-- +goose StatementBegin
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
-- +goose StatementEnd

CREATE TYPE owed_claimed AS (
    idx integer, id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
    due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
    lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
    delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
    last_error text, created_at timestamptz, updated_at timestamptz, queue_generation integer,
    claim_seq bigint, took boolean, mark_provider text, mark_code text, mark_at timestamptz);

-- +goose StatementBegin
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
-- +goose StatementEnd

-- +goose StatementBegin
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
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_claim_batch(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
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
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_claim_batch_marked(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
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
-- +goose StatementEnd

-- +goose StatementBegin
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
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_extend_claims(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz)
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
-- +goose StatementEnd

DROP FUNCTION owed_settle_delivered_batch(jsonb, timestamptz);

-- +goose StatementBegin
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
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION owed_settle_delivered_batch(jsonb, timestamptz);

-- +goose StatementBegin
CREATE FUNCTION owed_settle_delivered_batch(p_rows jsonb, p_now timestamptz)
RETURNS TABLE (idx integer, changed boolean, held_elsewhere boolean)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM jsonb_to_recordset(p_rows) AS x(
                 idx integer, tenant_id text, id bigint, claim_seq bigint, provider text,
                 started_at timestamptz, message_id text, http_status integer, possible_duplicate boolean)
             ORDER BY x.id, x.idx
    LOOP
        idx := r.idx;
        SELECT s.changed, s.held_elsewhere INTO changed, held_elsewhere
          FROM owed_settle_delivered(r.tenant_id, r.id, r.claim_seq, r.provider, r.started_at, p_now,
                                     r.message_id, r.http_status, r.possible_duplicate) s;
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_extend_claims(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz)
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
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_claim_batch_marked(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
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
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_claim_batch(p_rows jsonb, p_now timestamptz, p_lease_until timestamptz,
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
-- +goose StatementEnd

DROP FUNCTION owed_extend_claim(bigint, bigint, boolean, timestamptz, timestamptz);

DROP FUNCTION owed_claim_rows(jsonb, timestamptz, timestamptz, timestamptz);

DROP FUNCTION owed_claim_marked(integer, text, bigint, timestamptz, timestamptz, timestamptz, timestamptz, boolean);

DROP TYPE owed_claimed;

DROP FUNCTION owed_set_aside(text, bigint, text, timestamptz);

DROP FUNCTION owed_batch_row_error(text);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_apply_intent() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ended_at timestamptz := NEW.updated_at;
BEGIN
    -- A statement that resolves the intent itself has the last word: a
    -- batch that sets the row aside because the intent cannot be applied
    -- (refused).
    IF NEW.intent_outcome IS NOT NULL THEN
        RETURN NEW;
    END IF;
    IF OLD.intent = 'cancel' THEN
        IF NEW.state IN ('delivered', 'skipped', 'expired') THEN
            NEW.intent_outcome := 'too_late';
            RETURN NEW;
        END IF;
        -- Handed back, taken back by the sweep, failed, or moved or
        -- cancelled directly after the claim ran out: the cancel came
        -- first, and it wins.
        NEW.last_error := CASE WHEN NEW.state = 'failed'
                               THEN 'cancelled; the send in flight failed: ' || coalesce(NEW.last_error, 'failed')
                               ELSE 'cancelled' END;
        NEW.state := 'cancelled';
        NEW.settled_at := coalesce(NEW.settled_at, ended_at);
        NEW.lease_until := NULL;
        NEW.intent_outcome := 'applied';
        RETURN NEW;
    END IF;

    -- A reschedule. Only ledger.Reschedule moves a row from sending to
    -- pending (the worker's release hands it back as queued, the sweep's
    -- lease takes it as leased), and only a cancel makes it cancelled.
    IF NEW.state IN ('pending', 'cancelled') THEN
        NEW.intent_outcome := 'superseded';
    ELSIF NEW.settled_at IS NOT NULL THEN
        INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at,
                                        payload, payload_id, created_at, updated_at)
        VALUES (OLD.tenant_id, OLD.recipient, OLD.channel, OLD.kind, OLD.ref_id, OLD.intent_due_at,
                OLD.intent_expires_at, OLD.payload, OLD.payload_id, ended_at, ended_at)
        ON CONFLICT ON CONSTRAINT owed_notifications_schedule_key DO NOTHING;
        NEW.intent_outcome := 'new_row';
    ELSIF EXISTS (SELECT 1 FROM owed_notifications o
                   WHERE o.tenant_id = OLD.tenant_id AND o.recipient = OLD.recipient AND o.kind = OLD.kind
                     AND o.ref_id = OLD.ref_id AND o.due_at = OLD.intent_due_at AND o.id <> OLD.id) THEN
        -- A row for this recipient was scheduled at the new time after the
        -- intent was recorded: that row is the send the snooze asked for,
        -- and moving this one onto its key would fail the release.
        NEW.state := 'cancelled';
        NEW.settled_at := ended_at;
        NEW.lease_until := NULL;
        NEW.last_error := 'rescheduled onto a row already scheduled at that due time';
        NEW.intent_outcome := 'new_row';
    ELSE
        -- As qReschedule moves an open row: the new due time is a new
        -- provider idempotency key, so the message handed back (published
        -- for the old one) is stale to the claim, and the next publish gets
        -- a new queue generation. A row the sweep is taking back stays
        -- leased, so the sweep publishes it for the new due time; claimed_at
        -- stays as the release left it, so a send that may have reached the
        -- provider still marks the next one a possible duplicate.
        NEW.due_at := OLD.intent_due_at;
        NEW.expires_at := OLD.intent_expires_at;
        NEW.published_at := NULL;
        NEW.queue_generation := greatest(NEW.queue_generation, OLD.queue_generation + 1);
        IF NEW.state <> 'leased' THEN
            NEW.state := 'pending';
            NEW.lease_until := NULL;
        END IF;
        NEW.intent_outcome := 'applied';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
