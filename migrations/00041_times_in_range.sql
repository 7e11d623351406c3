-- Nothing one row holds can fail a shared batch (issue 25): no writer, an
-- application's SQL included, may store a time the ledger's readers cannot
-- hold (owed_time_in_range: the years 0001 to 9999, finite, never BC) in
-- owed_notifications, its intents or owed_items, nor a reschedule intent
-- whose shifted expiry is not after its due time. Before, a reschedule of a
-- row in flight to 9999-12-31T23:59:59.999999Z was recorded, and applying
-- it failed every shared batch touching the row (settles of other rows
-- left unrecorded, claims, the requeue, the expiry pass); a SQL-written
-- due_at of -infinity failed every cron run, a BC one made the sweep report
-- a stall forever, an expires_at of infinity kept a row failing its claim.
--
-- Rows already holding such a time are set aside first, each alone: an
-- owed row is settled failed with a reason naming the column and the
-- value (cancelled when a cancel was waiting on it), a waiting intent that
-- names one is resolved refused (a new outcome), and every out-of-range
-- time is then moved to the nearest bound so the checks hold. An item is
-- cancelled likewise. owed_apply_intent leaves alone an intent a statement
-- resolves itself, which is how the set-aside resolves one.
--
-- The checks are added NOT VALID (a brief lock, no scan), the rows fixed,
-- then validated under a lock that lets reads and writes go on, so the
-- migration runs outside a transaction; every step can be run again.
-- Expand-only: the previous release writes only times its API accepted.

-- +goose NO TRANSACTION

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_time_in_range(p_at timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT p_at IS NULL OR p_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'
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

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_intent_outcome,
    ADD CONSTRAINT owed_notifications_intent_outcome
        CHECK (intent_outcome IN ('applied', 'too_late', 'new_row', 'superseded', 'refused')) NOT VALID;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_due_at_in_range,
    ADD CONSTRAINT owed_notifications_due_at_in_range CHECK (owed_time_in_range(due_at)) NOT VALID;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_expires_at_in_range,
    ADD CONSTRAINT owed_notifications_expires_at_in_range CHECK (owed_time_in_range(expires_at)) NOT VALID;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_intent_due_at_in_range,
    ADD CONSTRAINT owed_notifications_intent_due_at_in_range CHECK (owed_time_in_range(intent_due_at)) NOT VALID;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_intent_expires_at_in_range,
    ADD CONSTRAINT owed_notifications_intent_expires_at_in_range CHECK (owed_time_in_range(intent_expires_at)) NOT VALID;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_times_in_range,
    ADD CONSTRAINT owed_notifications_times_in_range CHECK (
        owed_time_in_range(lease_until) AND owed_time_in_range(claimed_at) AND owed_time_in_range(published_at)
        AND owed_time_in_range(delivered_at) AND owed_time_in_range(settled_at) AND owed_time_in_range(created_at)
        AND owed_time_in_range(updated_at) AND owed_time_in_range(intent_at)) NOT VALID;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_intent_expiry,
    ADD CONSTRAINT owed_notifications_intent_expiry CHECK (intent_expires_at IS NULL OR intent_expires_at > intent_due_at) NOT VALID;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_starts_at_in_range,
    ADD CONSTRAINT owed_items_starts_at_in_range CHECK (owed_time_in_range(starts_at)) NOT VALID;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_times_in_range,
    ADD CONSTRAINT owed_items_times_in_range CHECK (
        owed_time_in_range(created_at) AND owed_time_in_range(updated_at) AND owed_time_in_range(cancelled_at)) NOT VALID;

-- +goose StatementBegin
DO $$
DECLARE
    lo CONSTANT timestamptz := '0001-01-01 00:00:00+00';
    hi CONSTANT timestamptz := '9999-12-31 23:59:59.999999+00';
    r record;
    row_bad text;
    intent_bad text;
    v_due timestamptz;
    v_exp timestamptz;
    v_idue timestamptz;
    v_iexp timestamptz;
    v_outcome text;
    v_state text;
    tries integer;
BEGIN
    FOR r IN SELECT n.* FROM owed_notifications n
              WHERE NOT (owed_time_in_range(n.due_at) AND owed_time_in_range(n.expires_at)
                         AND owed_time_in_range(n.intent_due_at) AND owed_time_in_range(n.intent_expires_at)
                         AND owed_time_in_range(n.lease_until) AND owed_time_in_range(n.claimed_at)
                         AND owed_time_in_range(n.published_at) AND owed_time_in_range(n.delivered_at)
                         AND owed_time_in_range(n.settled_at) AND owed_time_in_range(n.created_at)
                         AND owed_time_in_range(n.updated_at) AND owed_time_in_range(n.intent_at))
                 OR n.intent_expires_at <= n.intent_due_at
              ORDER BY n.id
    LOOP
        row_bad := concat_ws(', ',
            CASE WHEN NOT owed_time_in_range(r.due_at) THEN 'due_at ' || r.due_at END,
            CASE WHEN NOT owed_time_in_range(r.expires_at) THEN 'expires_at ' || r.expires_at END,
            CASE WHEN NOT owed_time_in_range(r.lease_until) THEN 'lease_until ' || r.lease_until END,
            CASE WHEN NOT owed_time_in_range(r.claimed_at) THEN 'claimed_at ' || r.claimed_at END,
            CASE WHEN NOT owed_time_in_range(r.published_at) THEN 'published_at ' || r.published_at END,
            CASE WHEN NOT owed_time_in_range(r.delivered_at) THEN 'delivered_at ' || r.delivered_at END,
            CASE WHEN NOT owed_time_in_range(r.settled_at) THEN 'settled_at ' || r.settled_at END,
            CASE WHEN NOT owed_time_in_range(r.created_at) THEN 'created_at ' || r.created_at END,
            CASE WHEN NOT owed_time_in_range(r.updated_at) THEN 'updated_at ' || r.updated_at END,
            CASE WHEN NOT owed_time_in_range(r.intent_at) THEN 'intent_at ' || r.intent_at END);
        intent_bad := concat_ws(', ',
            CASE WHEN NOT owed_time_in_range(r.intent_due_at) THEN 'intent_due_at ' || r.intent_due_at END,
            CASE WHEN NOT owed_time_in_range(r.intent_expires_at) THEN 'intent_expires_at ' || r.intent_expires_at END,
            CASE WHEN r.intent_expires_at <= r.intent_due_at
                 THEN 'intent_expires_at ' || r.intent_expires_at || ' not after intent_due_at ' || r.intent_due_at END);
        -- Each time moves to the nearest bound; an expiry that is then not
        -- after its due time is dropped.
        v_due := CASE WHEN owed_time_in_range(r.due_at) THEN r.due_at ELSE least(greatest(r.due_at, lo), hi) END;
        v_idue := CASE WHEN r.intent_due_at IS NOT NULL THEN CASE WHEN owed_time_in_range(r.intent_due_at) THEN r.intent_due_at ELSE least(greatest(r.intent_due_at, lo), hi) END END;
        v_iexp := CASE WHEN CASE WHEN owed_time_in_range(r.intent_expires_at) THEN r.intent_expires_at ELSE least(greatest(r.intent_expires_at, lo), hi) END > v_idue
                       THEN CASE WHEN owed_time_in_range(r.intent_expires_at) THEN r.intent_expires_at ELSE least(greatest(r.intent_expires_at, lo), hi) END END;
        v_outcome := r.intent_outcome;
        v_state := r.state;
        IF r.intent IS NOT NULL AND r.intent_outcome IS NULL AND (intent_bad <> '' OR (row_bad <> '' AND r.settled_at IS NULL)) THEN
            -- A waiting cancel still wins over a row set aside; any other
            -- waiting intent cannot be applied.
            v_outcome := CASE WHEN r.intent = 'cancel' AND intent_bad = '' THEN 'applied' ELSE 'refused' END;
        END IF;
        IF row_bad <> '' AND r.settled_at IS NULL THEN
            v_state := CASE WHEN v_outcome = 'applied' AND r.intent = 'cancel' AND r.intent_outcome IS NULL
                            THEN 'cancelled' ELSE 'failed' END;
        END IF;
        tries := 0;
        LOOP
            v_exp := CASE WHEN CASE WHEN owed_time_in_range(r.expires_at) THEN r.expires_at ELSE least(greatest(r.expires_at, lo), hi) END > v_due
                          THEN CASE WHEN owed_time_in_range(r.expires_at) THEN r.expires_at ELSE least(greatest(r.expires_at, lo), hi) END END;
            BEGIN
                UPDATE owed_notifications n
                   SET due_at = v_due, expires_at = v_exp, intent_due_at = v_idue, intent_expires_at = v_iexp,
                       intent_outcome = v_outcome, state = v_state,
                       lease_until = CASE WHEN v_state <> r.state THEN NULL
                                          ELSE CASE WHEN owed_time_in_range(n.lease_until) THEN n.lease_until ELSE least(greatest(n.lease_until, lo), hi) END END,
                       claimed_at = CASE WHEN owed_time_in_range(n.claimed_at) THEN n.claimed_at ELSE least(greatest(n.claimed_at, lo), hi) END,
                       published_at = CASE WHEN owed_time_in_range(n.published_at) THEN n.published_at ELSE least(greatest(n.published_at, lo), hi) END,
                       delivered_at = CASE WHEN owed_time_in_range(n.delivered_at) THEN n.delivered_at ELSE least(greatest(n.delivered_at, lo), hi) END,
                       settled_at = CASE WHEN v_state <> r.state THEN now()
                                         ELSE CASE WHEN owed_time_in_range(n.settled_at) THEN n.settled_at ELSE least(greatest(n.settled_at, lo), hi) END END,
                       created_at = CASE WHEN owed_time_in_range(n.created_at) THEN n.created_at ELSE least(greatest(n.created_at, lo), hi) END,
                       updated_at = CASE WHEN v_state <> r.state THEN now()
                                         ELSE CASE WHEN owed_time_in_range(n.updated_at) THEN n.updated_at ELSE least(greatest(n.updated_at, lo), hi) END END,
                       intent_at = CASE WHEN owed_time_in_range(n.intent_at) THEN n.intent_at ELSE least(greatest(n.intent_at, lo), hi) END,
                       last_error = CASE
                           WHEN v_state <> r.state THEN
                               'set aside: the ledger cannot hold ' || concat_ws(', ', nullif(row_bad, ''), nullif(intent_bad, ''))
                               || ' (every time must lie in the years 0001 to 9999)'
                           WHEN intent_bad <> '' AND v_outcome = 'refused' AND r.intent_outcome IS NULL THEN
                               concat_ws('; ', n.last_error, 'the ' || r.intent || ' waiting on the send was refused: '
                                         || intent_bad || ' (every time must lie in the years 0001 to 9999)')
                           ELSE n.last_error END
                 WHERE n.id = r.id;
                EXIT;
            EXCEPTION WHEN unique_violation THEN
                -- The due time moved onto the schedule key of another of the
                -- recipient's rows: step one microsecond inwards.
                tries := tries + 1;
                IF tries > 1000 THEN
                    RAISE;
                END IF;
                v_due := v_due + CASE WHEN v_due <= lo + interval '1 year' THEN interval '1 microsecond'
                                      ELSE interval '-1 microsecond' END;
            END;
        END LOOP;
    END LOOP;

    UPDATE owed_items i
       SET starts_at = CASE WHEN owed_time_in_range(i.starts_at) THEN i.starts_at ELSE least(greatest(i.starts_at, lo), hi) END,
           created_at = CASE WHEN owed_time_in_range(i.created_at) THEN i.created_at ELSE least(greatest(i.created_at, lo), hi) END,
           updated_at = CASE WHEN owed_time_in_range(i.updated_at) THEN i.updated_at ELSE least(greatest(i.updated_at, lo), hi) END,
           cancelled_at = CASE WHEN NOT owed_time_in_range(i.starts_at) THEN coalesce(CASE WHEN owed_time_in_range(i.cancelled_at) THEN i.cancelled_at ELSE least(greatest(i.cancelled_at, lo), hi) END, now())
                               ELSE CASE WHEN owed_time_in_range(i.cancelled_at) THEN i.cancelled_at ELSE least(greatest(i.cancelled_at, lo), hi) END END
     WHERE NOT (owed_time_in_range(i.starts_at) AND owed_time_in_range(i.created_at)
                AND owed_time_in_range(i.updated_at) AND owed_time_in_range(i.cancelled_at));
END
$$;
-- +goose StatementEnd

ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_outcome;

ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_due_at_in_range;

ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_expires_at_in_range;

ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_due_at_in_range;

ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_expires_at_in_range;

ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_times_in_range;

ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_expiry;

ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_starts_at_in_range;

ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_times_in_range;

-- +goose Down
-- The previous outcomes know no refused: such an intent reads superseded
-- (it was not applied, and the send's outcome stands).
UPDATE owed_notifications SET intent_outcome = 'superseded' WHERE intent_outcome = 'refused';

ALTER TABLE owed_notifications DROP CONSTRAINT IF EXISTS owed_notifications_due_at_in_range;

ALTER TABLE owed_notifications DROP CONSTRAINT IF EXISTS owed_notifications_expires_at_in_range;

ALTER TABLE owed_notifications DROP CONSTRAINT IF EXISTS owed_notifications_intent_due_at_in_range;

ALTER TABLE owed_notifications DROP CONSTRAINT IF EXISTS owed_notifications_intent_expires_at_in_range;

ALTER TABLE owed_notifications DROP CONSTRAINT IF EXISTS owed_notifications_times_in_range;

ALTER TABLE owed_notifications DROP CONSTRAINT IF EXISTS owed_notifications_intent_expiry;

ALTER TABLE owed_items DROP CONSTRAINT IF EXISTS owed_items_starts_at_in_range;

ALTER TABLE owed_items DROP CONSTRAINT IF EXISTS owed_items_times_in_range;

ALTER TABLE owed_notifications
    DROP CONSTRAINT IF EXISTS owed_notifications_intent_outcome,
    ADD CONSTRAINT owed_notifications_intent_outcome
        CHECK (intent_outcome IN ('applied', 'too_late', 'new_row', 'superseded')) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_outcome;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_apply_intent() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ended_at timestamptz := NEW.updated_at;
BEGIN
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

DROP FUNCTION IF EXISTS owed_time_in_range(timestamptz);
