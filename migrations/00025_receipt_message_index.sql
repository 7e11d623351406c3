-- The look-up every receipt makes (owed_receipt_record, migrations/00024):
-- the accepted attempt whose provider message id a callback names. Only
-- sends that returned an id are indexed.
--
-- The attempts table grows with every send, so the index is built
-- CONCURRENTLY, outside a transaction, and the ledger keeps working while
-- it builds. Should the build fail, it leaves an invalid index behind:
-- DROP INDEX CONCURRENTLY owed_notification_attempts_message; and run the
-- migration again.

-- +goose NO TRANSACTION

-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS owed_notification_attempts_message
    ON owed_notification_attempts (provider_message_id) WHERE provider_message_id IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS owed_notification_attempts_message;
