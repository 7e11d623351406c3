package emulator

import (
	"context"
	"database/sql"
	"fmt"
)

// schemaLockKey serialises schema creation between emulator processes
// starting at once on the same database.
const schemaLockKey = 0x6f776564_7175 // "owedqu"

// schemaDDL creates the emulator's own schema. Every statement is
// idempotent, so starting an emulator on an existing database upgrades it in
// place and never touches the ledger's tables or goose's version table.
//
// One table holds live and dead-lettered messages alike (dead_at set), so a
// dead-letter and a redrive are single-row updates rather than moves between
// tables. Idempotency keys live apart from messages because they must outlive
// an ack or a dead-letter delete for the whole dedup window.
//
// The schema is created only when missing: CREATE SCHEMA IF NOT EXISTS
// needs the CREATE privilege on the database even when the schema exists,
// and the emulator's own role (never the ledger's owner) is given the schema,
// not the database.
const schemaDDL = `
DO $$
BEGIN
	IF to_regnamespace('owed_queue') IS NULL THEN
		CREATE SCHEMA owed_queue;
	END IF;
END
$$;

CREATE TABLE IF NOT EXISTS owed_queue.messages (
	id              bigserial PRIMARY KEY,
	queue           text        NOT NULL,
	-- The payload is kept as the exact bytes published: jsonb would reorder
	-- keys and text would reject a stray invalid UTF-8 byte.
	payload         bytea       NOT NULL,
	idempotency_key text        NOT NULL,
	published_at    timestamptz NOT NULL DEFAULT now(),
	-- A message is deliverable once visible_at has passed. Publishing with a
	-- delay, a consume (the visibility timeout) and a nack all move it.
	visible_at      timestamptz NOT NULL,
	-- in_flight tells a consumed message (invisible until its visibility
	-- timeout) from a delayed one (invisible until its delay) in the stats.
	in_flight       boolean     NOT NULL DEFAULT false,
	receive_count   integer     NOT NULL DEFAULT 0,
	-- free_receives counts deliveries nacked with count_as_failure false
	-- (a provider 429): they do not count toward max_receives.
	free_receives   integer     NOT NULL DEFAULT 0,
	last_error      text,
	dead_at         timestamptz
);

-- The consume path: the oldest visible live messages of one queue.
CREATE INDEX IF NOT EXISTS messages_ready
	ON owed_queue.messages (queue, visible_at, id) WHERE dead_at IS NULL;

CREATE INDEX IF NOT EXISTS messages_dead
	ON owed_queue.messages (queue, id) WHERE dead_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS owed_queue.idempotency_keys (
	queue      text        NOT NULL,
	key        text        NOT NULL,
	message_id bigint      NOT NULL,
	created_at timestamptz NOT NULL,
	PRIMARY KEY (queue, key)
);

CREATE INDEX IF NOT EXISTS idempotency_keys_created
	ON owed_queue.idempotency_keys (created_at);
`

// ensureSchema creates or upgrades the owed_queue schema in one transaction
// under an advisory lock, so concurrent emulators do not race on CREATE.
func ensureSchema(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("emulator: create schema: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLockKey)); err != nil {
		return fmt.Errorf("emulator: create schema: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, schemaDDL); err != nil {
		return fmt.Errorf("emulator: create schema owed_queue: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("emulator: create schema: %w", err)
	}
	return nil
}
