-- owed_notifications' time-range checks spell the range out instead of
-- calling owed_time_in_range: a function in a CHECK is inlined, its body
-- parsed again, in every statement that writes the table, and the sixteen
-- calls cost each UPDATE about 0.3 ms (a one-row update by key, 0.8 against
-- 1.1-1.3 ms, on bench/ledgerscale's 1M ledger). Same names, same rows
-- refused (a NULL passes, as before). The checks are swapped in one ALTER
-- (a brief lock, no scan) as NOT VALID, then validated under a lock that
-- lets reads and writes go on, so the migration runs outside a transaction;
-- every step can be run again.

-- +goose NO TRANSACTION

-- +goose Up
ALTER TABLE owed_notifications
    DROP CONSTRAINT owed_notifications_times_in_range,
    DROP CONSTRAINT owed_notifications_due_at_in_range,
    DROP CONSTRAINT owed_notifications_expires_at_in_range,
    DROP CONSTRAINT owed_notifications_intent_due_at_in_range,
    DROP CONSTRAINT owed_notifications_intent_expires_at_in_range,
    DROP CONSTRAINT owed_notifications_not_before_in_range,
    DROP CONSTRAINT owed_notifications_held_from_check,
    DROP CONSTRAINT owed_notifications_digest_from_check,
    DROP CONSTRAINT owed_notifications_intent_held_from_check,
    ADD CONSTRAINT owed_notifications_times_in_range CHECK (
        (lease_until BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (claimed_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (published_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (delivered_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (settled_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (created_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (updated_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
        AND (intent_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')) NOT VALID,
    ADD CONSTRAINT owed_notifications_due_at_in_range CHECK (due_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00') NOT VALID,
    ADD CONSTRAINT owed_notifications_expires_at_in_range CHECK (expires_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00') NOT VALID,
    ADD CONSTRAINT owed_notifications_intent_due_at_in_range CHECK (intent_due_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00') NOT VALID,
    ADD CONSTRAINT owed_notifications_intent_expires_at_in_range CHECK (intent_expires_at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00') NOT VALID,
    ADD CONSTRAINT owed_notifications_not_before_in_range CHECK (not_before BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00') NOT VALID,
    ADD CONSTRAINT owed_notifications_held_from_check CHECK (held_from BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00') NOT VALID,
    ADD CONSTRAINT owed_notifications_digest_from_check CHECK (digest_from BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00') NOT VALID,
    ADD CONSTRAINT owed_notifications_intent_held_from_check CHECK (intent_held_from BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00') NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_times_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_due_at_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_expires_at_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_due_at_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_expires_at_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_not_before_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_held_from_check;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_digest_from_check;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_held_from_check;

-- +goose Down
ALTER TABLE owed_notifications
    DROP CONSTRAINT owed_notifications_times_in_range,
    DROP CONSTRAINT owed_notifications_due_at_in_range,
    DROP CONSTRAINT owed_notifications_expires_at_in_range,
    DROP CONSTRAINT owed_notifications_intent_due_at_in_range,
    DROP CONSTRAINT owed_notifications_intent_expires_at_in_range,
    DROP CONSTRAINT owed_notifications_not_before_in_range,
    DROP CONSTRAINT owed_notifications_held_from_check,
    DROP CONSTRAINT owed_notifications_digest_from_check,
    DROP CONSTRAINT owed_notifications_intent_held_from_check,
    ADD CONSTRAINT owed_notifications_times_in_range CHECK (
        owed_time_in_range(lease_until)
        AND owed_time_in_range(claimed_at)
        AND owed_time_in_range(published_at)
        AND owed_time_in_range(delivered_at)
        AND owed_time_in_range(settled_at)
        AND owed_time_in_range(created_at)
        AND owed_time_in_range(updated_at)
        AND owed_time_in_range(intent_at)) NOT VALID,
    ADD CONSTRAINT owed_notifications_due_at_in_range CHECK (owed_time_in_range(due_at)) NOT VALID,
    ADD CONSTRAINT owed_notifications_expires_at_in_range CHECK (owed_time_in_range(expires_at)) NOT VALID,
    ADD CONSTRAINT owed_notifications_intent_due_at_in_range CHECK (owed_time_in_range(intent_due_at)) NOT VALID,
    ADD CONSTRAINT owed_notifications_intent_expires_at_in_range CHECK (owed_time_in_range(intent_expires_at)) NOT VALID,
    ADD CONSTRAINT owed_notifications_not_before_in_range CHECK (owed_time_in_range(not_before)) NOT VALID,
    ADD CONSTRAINT owed_notifications_held_from_check CHECK (owed_time_in_range(held_from)) NOT VALID,
    ADD CONSTRAINT owed_notifications_digest_from_check CHECK (owed_time_in_range(digest_from)) NOT VALID,
    ADD CONSTRAINT owed_notifications_intent_held_from_check CHECK (owed_time_in_range(intent_held_from)) NOT VALID;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_times_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_due_at_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_expires_at_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_due_at_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_expires_at_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_not_before_in_range;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_held_from_check;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_digest_from_check;
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_intent_held_from_check;
