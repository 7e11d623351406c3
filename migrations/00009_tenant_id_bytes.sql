-- Tenant ids are bounded in bytes, as tenant.Validate bounds them
-- (tenant.MaxLength = 128), on every table whose tenant_id carries a check:
-- length() counts characters, so a 65-character id of two-byte characters
-- passed the table and was refused by every Go caller. owed_contacts has no
-- check on tenant_id and gets none here.
--
-- Each check is swapped in one ALTER (a brief lock, no scan) as NOT VALID,
-- then validated separately: VALIDATE scans the table under a lock that lets
-- reads and writes go on, so the ledger keeps working on a large table. The
-- migration runs outside a transaction for that reason; every step can be
-- run again. Should a VALIDATE fail, a row holds a tenant id the services
-- would refuse: find it with
--   SELECT id, tenant_id FROM <table> WHERE octet_length(tenant_id) > 128;
-- and the migration can be re-run once it is dealt with.

-- +goose NO TRANSACTION

-- +goose Up
ALTER TABLE notifications
    DROP CONSTRAINT IF EXISTS notifications_tenant_id_check,
    ADD CONSTRAINT notifications_tenant_id_check
        CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128) NOT VALID;
ALTER TABLE notifications VALIDATE CONSTRAINT notifications_tenant_id_check;

ALTER TABLE api_tokens
    DROP CONSTRAINT IF EXISTS api_tokens_tenant_id_check,
    ADD CONSTRAINT api_tokens_tenant_id_check
        CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128) NOT VALID;
ALTER TABLE api_tokens VALIDATE CONSTRAINT api_tokens_tenant_id_check;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_tenant_id_check,
    ADD CONSTRAINT owed_items_tenant_id_check
        CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128) NOT VALID;
ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_tenant_id_check;

-- +goose Down
-- The character bound admits every id the byte bound does, so validating
-- it never fails.
ALTER TABLE notifications
    DROP CONSTRAINT IF EXISTS notifications_tenant_id_check,
    ADD CONSTRAINT notifications_tenant_id_check
        CHECK (tenant_id <> '' AND length(tenant_id) <= 128) NOT VALID;
ALTER TABLE notifications VALIDATE CONSTRAINT notifications_tenant_id_check;

ALTER TABLE api_tokens
    DROP CONSTRAINT IF EXISTS api_tokens_tenant_id_check,
    ADD CONSTRAINT api_tokens_tenant_id_check
        CHECK (tenant_id <> '' AND length(tenant_id) <= 128) NOT VALID;
ALTER TABLE api_tokens VALIDATE CONSTRAINT api_tokens_tenant_id_check;

ALTER TABLE owed_items
    DROP CONSTRAINT IF EXISTS owed_items_tenant_id_check,
    ADD CONSTRAINT owed_items_tenant_id_check
        CHECK (tenant_id <> '' AND length(tenant_id) <= 128) NOT VALID;
ALTER TABLE owed_items VALIDATE CONSTRAINT owed_items_tenant_id_check;
