-- Intents: a cancel, a reschedule (snooze) or an update (a new payload,
-- expiry or due time) that lands while a worker holds a row's claim (state
-- sending) is recorded on the row by ledger.Cancel, ledger.Reschedule or
-- ledger.Update (intent, intent_due_at and intent_expires_at for a
-- reschedule or an update, intent_payload for an update's new payload,
-- intent_at) and applied here when the
-- row leaves sending, whoever moves it: the worker's release or settle, the
-- sweep's lease or expiry of a row whose claim ran out, a direct cancel or
-- reschedule after that, or owed_claim handing back a lapsed claim. A later
-- claim of the row (sending to sending) leaves the intent alone, so it
-- waits for the send that finally ends. intent_outcome says how it ended:
--
--   applied     the row took it: cancelled, or moved to intent_due_at as a
--               reschedule moves an open row (pending, a new queue
--               generation, never published under the new due time), or
--               updated (its payload, expiry and due time replaced, moved
--               as a reschedule moves it when the due time changed);
--   too_late    a cancel of a send that ended delivered (or skipped or
--               expired: nothing was sent, nothing will be), or an update
--               of one: what was sent was the old content;
--   new_row     a reschedule of a send that settled: the outcome stands and
--               a new row for the same recipient, channel and payload is
--               scheduled at intent_due_at (or the one already there kept);
--   superseded  a direct cancel or reschedule made after the claim ran out
--               is the later word;
--   refused     the ledger could not apply it (see
--               owed_notifications_intent_outcome); the send's outcome
--               stands.
--
-- A move (a reschedule, an update's new due time) takes the quiet hours in
-- force as a pending row does (quiet_hours.sql): the ledger records it
-- already held, intent_due_at at the window's opening and intent_held_from
-- the time asked, and keeps it so when the windows change, so the row, or
-- the new row of a send that settled, lands held; an intent whose expiry
-- falls inside its hold ends the row expired, never sent. Only the Go side
-- reads windows, on the recipient's wall clock in its tz database.
--
-- A reschedule of a row just delivered schedules the send again because
-- that is what the caller was promised: the API answered that the snooze
-- was recorded. A cancel cannot take back a delivered send; its answer said
-- the send was in flight. A send that failed with a cancel recorded ends
-- cancelled (the failure stays in last_error), so a redrive never sends it.
--
-- The intent resolves at the instant of the statement that ends the send
-- (its updated_at, which every ledger statement stamps with its now, so a
-- test's clock stamps it too). The function runs as the role that wrote
-- the row (SECURITY INVOKER): that statement runs in the row's tenant
-- scope, or the definer's across tenants, which is the scope its look-up
-- and its new row need.
-- owed_intent_expires_in_hold says whether an intent held for quiet hours
-- (p_held_from, the time asked; p_due, the opening) expires before its
-- opening (p_expires): applied, it settles the row expired, never sent.
CREATE FUNCTION owed_intent_expires_in_hold(p_held_from timestamptz, p_due timestamptz, p_expires timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT p_held_from IS NOT NULL AND p_expires IS NOT NULL AND p_expires <= p_due
$$;

-- owed_expired_in_hold is the last_error of a row settled because its
-- expiry falls inside its hold: ledger.expiredInHold's text, which the Go
-- side writes for the rows it settles itself.
CREATE FUNCTION owed_expired_in_hold() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT 'expired before it was sent: its expiry falls inside the quiet hours that hold it'::text
$$;

CREATE FUNCTION owed_apply_intent() RETURNS trigger
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
    IF OLD.intent = 'update' THEN
        IF NEW.state IN ('delivered', 'skipped', 'expired') THEN
            NEW.intent_outcome := 'too_late';
            RETURN NEW;
        ELSIF NEW.state IN ('pending', 'cancelled') THEN
            NEW.intent_outcome := 'superseded';
            RETURN NEW;
        END IF;
        -- Handed back, taken back by the sweep, or failed (a redrive then
        -- sends the new content): the row takes the update.
        IF OLD.intent_payload IS NOT NULL THEN
            NEW.payload := OLD.intent_payload;
            NEW.payload_id := NULL;
        END IF;
        NEW.expires_at := OLD.intent_expires_at;
        NEW.time_zone := coalesce(OLD.intent_time_zone, NEW.time_zone);
        IF OLD.intent_due_at IS DISTINCT FROM OLD.due_at THEN
            IF owed_intent_expires_in_hold(OLD.intent_held_from, OLD.intent_due_at, OLD.intent_expires_at) THEN
                -- A failed send keeps its failure in the reason.
                NEW.last_error := CASE WHEN NEW.state = 'failed'
                                       THEN owed_expired_in_hold() || '; the send in flight failed: '
                                            || coalesce(NEW.last_error, 'failed')
                                       ELSE owed_expired_in_hold() END;
                NEW.state := 'expired';
                NEW.settled_at := ended_at;
                NEW.lease_until := NULL;
                NEW.intent_outcome := 'applied';
                RETURN NEW;
            END IF;
            IF EXISTS (SELECT 1 FROM owed_notifications o
                        WHERE o.tenant_id = OLD.tenant_id AND o.recipient = OLD.recipient AND o.kind = OLD.kind
                          AND o.ref_id = OLD.ref_id AND o.due_at = OLD.intent_due_at AND o.id <> OLD.id) THEN
                -- As for a reschedule: a row scheduled at the new time
                -- since is the send the update asked for.
                NEW.state := 'cancelled';
                NEW.settled_at := ended_at;
                NEW.lease_until := NULL;
                NEW.last_error := 'updated onto a row already scheduled at that due time';
                NEW.intent_outcome := 'new_row';
                RETURN NEW;
            END IF;
            NEW.due_at := OLD.intent_due_at;
            NEW.due_local := OLD.intent_due_local;
            NEW.held_from := OLD.intent_held_from;
            NEW.published_at := NULL;
            NEW.queue_generation := greatest(NEW.queue_generation, OLD.queue_generation + 1);
            IF NEW.state NOT IN ('leased', 'failed') THEN
                NEW.state := 'pending';
                NEW.lease_until := NULL;
            END IF;
        END IF;
        NEW.intent_outcome := 'applied';
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
            IF owed_intent_expires_in_hold(OLD.intent_held_from, OLD.intent_due_at, OLD.intent_expires_at) THEN
                -- Written settled, as ledger.Schedule writes a row whose
                -- expiry falls inside its hold: the record says why it
                -- was never sent.
                INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at,
                                                payload, payload_id, created_at, updated_at, time_zone, urgent,
                                                state, settled_at, last_error)
                VALUES (OLD.tenant_id, OLD.recipient, OLD.channel, OLD.kind, OLD.ref_id, OLD.intent_held_from,
                        OLD.intent_expires_at, OLD.payload, OLD.payload_id, ended_at, ended_at, OLD.time_zone,
                        OLD.urgent, 'expired', ended_at, owed_expired_in_hold())
                ON CONFLICT ON CONSTRAINT owed_notifications_schedule_key DO NOTHING;
            ELSE
                INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at,
                                                payload, payload_id, created_at, updated_at, time_zone, urgent,
                                                held_from)
                VALUES (OLD.tenant_id, OLD.recipient, OLD.channel, OLD.kind, OLD.ref_id, OLD.intent_due_at,
                        OLD.intent_expires_at, OLD.payload, OLD.payload_id, ended_at, ended_at, OLD.time_zone,
                        OLD.urgent, OLD.intent_held_from)
                ON CONFLICT ON CONSTRAINT owed_notifications_schedule_key DO NOTHING;
            END IF;
            NEW.intent_outcome := 'new_row';
        EXCEPTION WHEN data_exception OR integrity_constraint_violation OR plpgsql_error
                       OR insufficient_privilege THEN
            NEW.intent_outcome := 'refused';
            NEW.last_error := concat_ws('; ', NEW.last_error,
                                        'the reschedule waiting on the send was refused: ' || SQLERRM);
        END;
    ELSIF owed_intent_expires_in_hold(OLD.intent_held_from, OLD.intent_due_at, OLD.intent_expires_at) THEN
        NEW.state := 'expired';
        NEW.settled_at := ended_at;
        NEW.lease_until := NULL;
        NEW.last_error := owed_expired_in_hold();
        NEW.intent_outcome := 'applied';
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
        NEW.due_local := NULL;
        NEW.held_from := OLD.intent_held_from;
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

-- The WHEN clause is tested in the executor without calling the function,
-- so every other update costs nothing.
CREATE TRIGGER owed_notifications_apply_intent
    BEFORE UPDATE ON owed_notifications
    FOR EACH ROW
    WHEN (OLD.state = 'sending' AND NEW.state <> 'sending'
          AND OLD.intent IS NOT NULL AND OLD.intent_outcome IS NULL)
    EXECUTE FUNCTION owed_apply_intent();
