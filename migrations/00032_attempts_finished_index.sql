-- The dashboard's sends per minute (owed_ledger_sends_per_minute,
-- migrations/00031) and owedctl stats' duplicate counts read the attempts
-- that finished since a time; this index keeps that read to the window
-- instead of the whole table.
--
-- The attempts table grows with every send, so the index is built
-- CONCURRENTLY, outside a transaction, as migrations/00025 builds its own.
-- Should the build fail, it leaves an invalid index behind: DROP INDEX
-- CONCURRENTLY owed_notification_attempts_finished; and run the migration
-- again.

-- +goose NO TRANSACTION

-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS owed_notification_attempts_finished
    ON owed_notification_attempts (finished_at);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS owed_notification_attempts_finished;
