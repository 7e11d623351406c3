-- The operators' aggregates (owed_ledger_stats, owed_ledger_receipt_stats)
-- read the rows settled since a time through owed_notifications_settled
-- instead of scanning the ledger, and the ledger's tables get autovacuum
-- settings for their churn (internal/ledger/sql/notifications.sql and
-- attempts.sql say why each value).
--
-- The index is built CONCURRENTLY, outside a transaction, so delivery keeps
-- running while it builds (expand-only: the previous release ignores it);
-- the storage settings take a SHARE UPDATE EXCLUSIVE lock, which reads and
-- writes pass. Should the build fail, it leaves an invalid index behind:
-- DROP INDEX CONCURRENTLY owed_notifications_settled; and run the
-- migration again.

-- +goose NO TRANSACTION

-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS owed_notifications_settled
    ON owed_notifications (settled_at) INCLUDE (state, due_at, delivered_at) WHERE settled_at IS NOT NULL;
ALTER TABLE owed_notifications SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 10000,
                                    autovacuum_vacuum_insert_scale_factor = 0.01,
                                    autovacuum_analyze_scale_factor = 0.01);
ALTER TABLE owed_notification_attempts SET (autovacuum_vacuum_insert_scale_factor = 0.01,
                                            autovacuum_analyze_scale_factor = 0.01);

-- +goose Down
ALTER TABLE owed_notification_attempts RESET (autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor);
ALTER TABLE owed_notifications RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
                                      autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor);
DROP INDEX CONCURRENTLY IF EXISTS owed_notifications_settled;
