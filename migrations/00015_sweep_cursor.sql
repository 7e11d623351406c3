-- The sweep's index carries the row's id after its due time.
--
-- A sweep run leases slice after slice, and each slice of pending rows
-- starts after the last row of the one before in (due_at, id) order
-- (ledger.qLeasePending). With due_at alone in the index, a burst of rows
-- sharing one due time (an event fanned out to every subscriber) made every
-- slice step again over all the rows the run had already leased, which a
-- 100,000-row burst pays about 10,000,000 times over; with id in the index
-- the cursor is a range the scan starts from. Every other reader of the
-- index (the survey, the expiry's siblings, the backlog) reads it by due_at
-- as before. The index keeps its name, and its predicate: settled rows are
-- not in it, so its size is what is owed, not what the ledger holds.
--
-- Built without CONCURRENTLY (migrations run in a transaction): it reads the
-- whole table once and blocks writes to it meanwhile, seconds for a ledger
-- of millions of rows.

-- +goose Up
DROP INDEX owed_notifications_owed_due;
CREATE INDEX owed_notifications_owed_due ON owed_notifications (due_at, id) WHERE settled_at IS NULL;

-- +goose Down
DROP INDEX owed_notifications_owed_due;
CREATE INDEX owed_notifications_owed_due ON owed_notifications (due_at) WHERE settled_at IS NULL;
