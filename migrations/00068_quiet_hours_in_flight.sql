-- Quiet hours after an in-flight change (issue 31): a reschedule or update
-- waiting on a send records the hold of its new time (intent_held_from, its
-- intent_due_at being the window's opening), and owed_apply_intent gives
-- the row that hold, or settles it expired when its expiry falls inside
-- the hold, when the send is handed back. An update's zone waits with it
-- (intent_time_zone): before, an update in flight that gave a local time
-- in a zone the row lacked failed the release that applied it.
--
-- Expand-only: two nullable columns, a check that accepts every row the
-- previous one did, two new functions and the trigger function's new
-- body, which reads the columns only when the ledger wrote them.

-- +goose Up
ALTER TABLE owed_notifications
    ADD COLUMN intent_held_from timestamptz CHECK (owed_time_in_range(intent_held_from)),
    ADD COLUMN intent_time_zone text CHECK (intent_time_zone <> '' AND octet_length(intent_time_zone) <= 64);

-- The new check is the old one for every row there is (intent_held_from
-- is NULL in each), so validating it finds nothing; it takes only a SHARE
-- UPDATE EXCLUSIVE lock, which writers pass.
ALTER TABLE owed_notifications DROP CONSTRAINT owed_notifications_intent_expiry;
ALTER TABLE owed_notifications ADD CONSTRAINT owed_notifications_intent_expiry
    CHECK (intent_expires_at IS NULL OR intent_expires_at > coalesce(intent_held_from, intent_due_at)) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_expiry;

-- +goose StatementBegin
CREATE FUNCTION owed_intent_expires_in_hold(p_held_from timestamptz, p_due timestamptz, p_expires timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT p_held_from IS NOT NULL AND p_expires IS NOT NULL AND p_expires <= p_due
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_expired_in_hold() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT 'expired before it was sent: its expiry falls inside the quiet hours that hold it'::text
$$;
-- +goose StatementEnd

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
-- +goose StatementEnd

-- +goose Down
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
        IF OLD.intent_due_at IS DISTINCT FROM OLD.due_at THEN
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
            INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at,
                                            payload, payload_id, created_at, updated_at, time_zone)
            VALUES (OLD.tenant_id, OLD.recipient, OLD.channel, OLD.kind, OLD.ref_id, OLD.intent_due_at,
                    OLD.intent_expires_at, OLD.payload, OLD.payload_id, ended_at, ended_at, OLD.time_zone)
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
        NEW.due_local := NULL;
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

DROP FUNCTION owed_expired_in_hold();
DROP FUNCTION owed_intent_expires_in_hold(timestamptz, timestamptz, timestamptz);

-- A held intent whose expiry falls inside its hold breaks the old check:
-- it goes back to the time it asked for, where the previous release, which
-- knows no holds, would have put it.
UPDATE owed_notifications SET intent_due_at = intent_held_from
 WHERE intent_held_from IS NOT NULL AND intent_expires_at <= intent_due_at;
ALTER TABLE owed_notifications DROP CONSTRAINT owed_notifications_intent_expiry;
ALTER TABLE owed_notifications ADD CONSTRAINT owed_notifications_intent_expiry
    CHECK (intent_expires_at IS NULL OR intent_expires_at > intent_due_at) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_expiry;

ALTER TABLE owed_notifications
    DROP COLUMN intent_time_zone,
    DROP COLUMN intent_held_from;
