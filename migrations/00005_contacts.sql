-- Contacts for the SQL recipient resolver (OWED_RESOLVER=sql): the
-- application maps a ledger row's recipient to a channel address here, and
-- may mark a contact opted out, which settles its rows skipped. Tenant data:
-- FORCE ROW LEVEL SECURITY with the ledger's policy.

-- +goose Up
CREATE TABLE owed_contacts (
    tenant_id  text        NOT NULL,
    recipient  text        NOT NULL,
    channel    text        NOT NULL,
    address    text        NOT NULL CHECK (address <> '' AND length(address) <= 512),
    opted_out  boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, recipient, channel)
);
ALTER TABLE owed_contacts ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_contacts FORCE ROW LEVEL SECURITY;
CREATE POLICY owed_contacts_tenant ON owed_contacts
    USING (tenant_id = current_setting('owed.tenant_id', true)
           OR current_setting('owed.bypass_rls', true) = 'on')
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true)
           OR current_setting('owed.bypass_rls', true) = 'on');
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_app') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON owed_contacts TO owed_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE owed_contacts;
