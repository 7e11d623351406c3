-- Undeliverable recipients: an address a provider refused for good as the
-- recipient's own (a STOP reply, Twilio 21610; a blocked bot; an inactive
-- Postmark recipient, 406; an invalid number). The worker marks the address
-- when a send fails so (provider.Error.Recipient) and, before each later
-- send to the same address on the same channel in the same tenant, reads
-- the mark (owed_claim_batch_marked returns it with the claim) and settles
-- the row skipped instead of calling the provider again. `owedctl
-- recipients clear` removes a mark (the customer re-subscribed); marking
-- again keeps the latest failure.
CREATE TABLE owed_undeliverable (
    tenant_id       text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    channel         text        NOT NULL CHECK (channel <> '' AND octet_length(channel) <= 64),
    -- The resolved address the provider refused (a phone number, an email
    -- address, a chat id), not the row's recipient name.
    address         text        NOT NULL CHECK (address <> '' AND octet_length(address) <= 1024),
    provider        text        NOT NULL CHECK (provider <> '' AND octet_length(provider) <= 64),
    code            text        NOT NULL CHECK (octet_length(code) <= 256),
    reason          text        NOT NULL CHECK (octet_length(reason) <= 4096),
    -- The row whose send failed; NULL once that row is gone.
    notification_id bigint      REFERENCES owed_notifications (id) ON DELETE SET NULL,
    marked_at       timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, channel, address)
);

-- A tenant table like every other: one tenant per transaction for the
-- runtime role and applications, the owner exempt. The worker's claim
-- batch reads the marks of every tenant it names (owed_tenant_scope);
-- writes stay one tenant's.
ALTER TABLE owed_undeliverable ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_undeliverable FORCE ROW LEVEL SECURITY;
CREATE POLICY owed_undeliverable_tenant ON owed_undeliverable TO owed_runtime
    USING (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]))
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true));
-- An owed_apps login sees and writes only a tenant it names and is bound
-- to (owed_apps_tenant, internal/apps/sql/logins.sql).
CREATE POLICY owed_undeliverable_apps ON owed_undeliverable TO owed_apps
    USING (tenant_id = (SELECT owed_apps_tenant()))
    WITH CHECK (tenant_id = (SELECT owed_apps_tenant()));
CREATE POLICY owed_undeliverable_owner ON owed_undeliverable TO CURRENT_USER USING (true) WITH CHECK (true);

-- An application may read its own marks (to stop scheduling for them), not
-- write them.
GRANT SELECT, INSERT, UPDATE, DELETE ON owed_undeliverable TO owed_runtime;
GRANT SELECT ON owed_undeliverable TO owed_apps;
