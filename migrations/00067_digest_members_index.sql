-- Digests (issue 31): the index on a digest's owed members, which the
-- worker's claim of a digest reads (owed_notifications_digest,
-- internal/ledger/sql/notifications.sql). Expand-only.
--
-- The index is built CONCURRENTLY, outside a transaction, so delivery keeps
-- running while it builds; should the build fail, it leaves an invalid
-- index behind: DROP INDEX CONCURRENTLY owed_notifications_digest; and run
-- the migration again.

-- +goose NO TRANSACTION

-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS owed_notifications_digest ON owed_notifications (tenant_id, digest_id)
    WHERE digest_id IS NOT NULL AND settled_at IS NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS owed_notifications_digest;
