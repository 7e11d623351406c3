-- An application writing SQL (owed_apps) writes owed rows only
-- (internal/ledger/sql/notifications.sql says why): it inserts the columns
-- of a row to schedule, so every row it writes starts pending with no
-- lease, claim, publish or attempt of its own, and it may change a pending
-- row's schedule or payload, or cancel it, but never make a row leased,
-- queued or sending. Before, an owed_apps login inserted 200 rows queued
-- with lease_until 9999-01-01 and every sweep then held back.
--
-- The services' roles are unchanged, so neither release breaks; an
-- application that wrote the other columns is refused from here on.

-- +goose Up
REVOKE INSERT, UPDATE ON owed_notifications FROM owed_apps;
GRANT INSERT (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at, payload)
    ON owed_notifications TO owed_apps;
GRANT UPDATE (due_at, expires_at, payload, state, settled_at, last_error, updated_at)
    ON owed_notifications TO owed_apps;
CREATE POLICY owed_notifications_apps_pending ON owed_notifications AS RESTRICTIVE FOR UPDATE TO owed_apps
    USING (state = 'pending')
    WITH CHECK (state IN ('pending', 'cancelled'));

-- +goose Down
DROP POLICY owed_notifications_apps_pending ON owed_notifications;
REVOKE INSERT (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at, payload)
    ON owed_notifications FROM owed_apps;
REVOKE UPDATE (due_at, expires_at, payload, state, settled_at, last_error, updated_at)
    ON owed_notifications FROM owed_apps;
GRANT INSERT, UPDATE ON owed_notifications TO owed_apps;
