-- The keyset read behind GET /v1/notifications' cursor (ledger.FindPage):
-- one tenant's rows, newest due first, from a (due_at, id) position. Without
-- it a page of a large tenant sorts every one of its rows; with it a page
-- reads the index backwards from the cursor and stops at the limit, so page
-- 1,000 costs what page 1 does.
--
-- Built CONCURRENTLY, outside a transaction, so the ledger keeps working
-- while it builds (expand-only: the previous release ignores it). Should the
-- build fail, it leaves an invalid index behind:
-- DROP INDEX CONCURRENTLY owed_notifications_tenant_due; and run the
-- migration again.

-- +goose NO TRANSACTION

-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS owed_notifications_tenant_due
    ON owed_notifications (tenant_id, due_at, id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS owed_notifications_tenant_due;
