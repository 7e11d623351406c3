-- The runtime role's tenant policies read the scope once per statement.
-- owed_tenant_in_scope(tenant_id), inlined into each policy, cast the
-- setting owed.tenant_ids (a text array literal) to an array for every row
-- a statement looked at: a tenth of a worker batch's CPU at 200 rows a
-- batch (array_in). The policies now compare the row's tenant with
-- owed_tenant_scope() under a sub-select, an init plan evaluated once per
-- statement. The same tenants are in scope: the one of owed.tenant_id and
-- those of owed.tenant_ids, none when neither is set.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION owed_tenant_scope() RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT ARRAY[current_setting('owed.tenant_id', true)]
       || nullif(current_setting('owed.tenant_ids', true), '')::text[]
$$;
-- +goose StatementEnd
ALTER POLICY owed_notifications_tenant ON owed_notifications
    USING (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]))
    WITH CHECK (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]));
ALTER POLICY owed_notification_attempts_tenant ON owed_notification_attempts
    WITH CHECK (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]));
ALTER POLICY owed_event_payloads_tenant ON owed_event_payloads
    USING (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]));
ALTER POLICY owed_undeliverable_tenant ON owed_undeliverable
    USING (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]));
-- An upgraded ledger's legacy partitions (migration 00070) keep the
-- policies they had as tables; they are rewritten alike.
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('owed_notifications_legacy') IS NOT NULL THEN
        ALTER POLICY owed_notifications_tenant ON owed_notifications_legacy
            USING (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]))
            WITH CHECK (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]));
    END IF;
    IF to_regclass('owed_notification_attempts_legacy') IS NOT NULL THEN
        ALTER POLICY owed_notification_attempts_tenant ON owed_notification_attempts_legacy
            WITH CHECK (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]));
    END IF;
END
$$;
-- +goose StatementEnd
DROP FUNCTION owed_tenant_in_scope(text);

-- +goose Down
-- +goose StatementBegin
CREATE FUNCTION owed_tenant_in_scope(p_tenant text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT p_tenant = current_setting('owed.tenant_id', true)
    OR p_tenant = ANY (nullif(current_setting('owed.tenant_ids', true), '')::text[])
$$;
-- +goose StatementEnd
ALTER POLICY owed_notifications_tenant ON owed_notifications
    USING (owed_tenant_in_scope(tenant_id))
    WITH CHECK (owed_tenant_in_scope(tenant_id));
ALTER POLICY owed_notification_attempts_tenant ON owed_notification_attempts
    WITH CHECK (owed_tenant_in_scope(tenant_id));
ALTER POLICY owed_event_payloads_tenant ON owed_event_payloads
    USING (owed_tenant_in_scope(tenant_id));
ALTER POLICY owed_undeliverable_tenant ON owed_undeliverable
    USING (owed_tenant_in_scope(tenant_id));
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('owed_notifications_legacy') IS NOT NULL THEN
        ALTER POLICY owed_notifications_tenant ON owed_notifications_legacy
            USING (owed_tenant_in_scope(tenant_id))
            WITH CHECK (owed_tenant_in_scope(tenant_id));
    END IF;
    IF to_regclass('owed_notification_attempts_legacy') IS NOT NULL THEN
        ALTER POLICY owed_notification_attempts_tenant ON owed_notification_attempts_legacy
            WITH CHECK (owed_tenant_in_scope(tenant_id));
    END IF;
END
$$;
-- +goose StatementEnd
DROP FUNCTION owed_tenant_scope();
