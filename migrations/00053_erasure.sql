-- Erasure (ledger.Erase, `owedctl erase`, POST /v1/recipients/erase): the
-- audit table owed_erasures (internal/ledger/sql/erasures.sql) and the
-- index owed_notifications_payload that lets an erasure find whether
-- another row still points at a shared payload
-- (internal/ledger/sql/notifications.sql). Expand-only: the previous release
-- uses neither.
--
-- The index is built CONCURRENTLY, outside a transaction, so delivery keeps
-- running while it builds; should the build fail, it leaves an invalid
-- index behind: DROP INDEX CONCURRENTLY owed_notifications_payload; and run
-- the migration again.

-- +goose NO TRANSACTION

-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS owed_notifications_payload
    ON owed_notifications (tenant_id, payload_id) WHERE payload_id IS NOT NULL;

-- +goose StatementBegin
DO $$
BEGIN
IF to_regclass('owed_erasures') IS NULL THEN
CREATE TABLE owed_erasures (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    channel          text        CHECK (channel <> '' AND octet_length(channel) <= 64),
    requested_by     text        NOT NULL CHECK (requested_by <> '' AND octet_length(requested_by) <= 256),
    reason           text        NOT NULL CHECK (octet_length(reason) <= 1024),
    at               timestamptz NOT NULL,
    notification_ids bigint[]    NOT NULL,
    cancelled        integer     NOT NULL CHECK (cancelled >= 0),
    in_flight        integer     NOT NULL CHECK (in_flight >= 0),
    attempts         integer     NOT NULL CHECK (attempts >= 0),
    contacts         integer     NOT NULL CHECK (contacts >= 0),
    undeliverable    integer     NOT NULL CHECK (undeliverable >= 0),
    items            integer     NOT NULL CHECK (items >= 0),
    shared_payloads  integer     NOT NULL CHECK (shared_payloads >= 0)
);
CREATE INDEX owed_erasures_tenant_at ON owed_erasures (tenant_id, at);

ALTER TABLE owed_erasures ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_erasures FORCE ROW LEVEL SECURITY;
CREATE POLICY owed_erasures_tenant ON owed_erasures TO owed_runtime
    USING (tenant_id = current_setting('owed.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true));
CREATE POLICY owed_erasures_owner ON owed_erasures TO CURRENT_USER USING (true) WITH CHECK (true);

GRANT SELECT, INSERT ON owed_erasures TO owed_runtime;
END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE IF EXISTS owed_erasures;
DROP INDEX CONCURRENTLY IF EXISTS owed_notifications_payload;
