-- The two indexes the fair lease reads (migrations/00035,
-- internal/ledger/sql/notifications.sql explains each):
-- owed_notifications_pending_owed, each tenant's and channel's pending rows
-- oldest owed first, which the lease skips through from one (tenant,
-- channel) to the next; and owed_notifications_in_flight, the rows a lease
-- holds by the lease's end, from which it counts the work in flight of each
-- account and takes the rows whose lease ran out.
--
-- Built CONCURRENTLY, outside a transaction, so the ledger keeps working
-- while they build (expand-only: the previous release ignores them).
-- Should a build fail, it leaves an invalid index behind: drop it with DROP
-- INDEX CONCURRENTLY and run the migration again.

-- +goose NO TRANSACTION

-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS owed_notifications_pending_owed ON owed_notifications
    (tenant_id, channel, greatest(due_at, created_at), due_at, id) WHERE state = 'pending';
CREATE INDEX CONCURRENTLY IF NOT EXISTS owed_notifications_in_flight ON owed_notifications (lease_until)
    WHERE state IN ('leased', 'queued', 'sending');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS owed_notifications_in_flight;
DROP INDEX CONCURRENTLY IF EXISTS owed_notifications_pending_owed;
