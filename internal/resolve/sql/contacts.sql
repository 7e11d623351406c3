-- Contacts for the SQL recipient resolver (OWED_RESOLVER=sql): the
-- application maps a ledger row's recipient to a channel address here, and
-- may mark a contact opted out, which settles its rows skipped. Tenant
-- data, under the ledger's policy shape.
CREATE TABLE owed_contacts (
    -- Unlike the other tenant tables', this tenant_id carries no bound:
    -- none was ever added.
    tenant_id  text        NOT NULL,
    recipient  text        NOT NULL,
    channel    text        NOT NULL,
    address    text        NOT NULL CHECK (address <> '' AND octet_length(address) <= 512),
    opted_out  boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- The recipient's IANA time zone, the default for a row scheduled in
    -- local time without one (ledger.Schedule reads the contact of the
    -- row's channel first, then any of the recipient's). The name is
    -- checked when a row uses it; the bound is localtime.MaxZoneLen.
    time_zone  text        CHECK (time_zone <> '' AND octet_length(time_zone) <= 64),
    PRIMARY KEY (tenant_id, recipient, channel)
);

ALTER TABLE owed_contacts ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_contacts FORCE ROW LEVEL SECURITY;
CREATE POLICY owed_contacts_tenant ON owed_contacts TO owed_runtime
    USING (tenant_id = current_setting('owed.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true));
-- An owed_apps login sees and writes only a tenant it names and is bound
-- to (owed_apps_tenant, internal/apps/sql/logins.sql).
CREATE POLICY owed_contacts_apps ON owed_contacts TO owed_apps
    USING (tenant_id = (SELECT owed_apps_tenant()))
    WITH CHECK (tenant_id = (SELECT owed_apps_tenant()));
CREATE POLICY owed_contacts_owner ON owed_contacts TO CURRENT_USER USING (true) WITH CHECK (true);

GRANT SELECT, INSERT, UPDATE, DELETE ON owed_contacts TO owed_runtime, owed_apps;
