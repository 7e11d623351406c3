-- owed_items: the documented table an application fills with upcoming items
-- (calendar events, follow-ups) for the materialiser to turn into ledger rows.
-- POST /cron/materialise reads the items starting within the look-ahead window
-- (OWED_LOOKAHEAD) and schedules one notification per item, due at
-- starts_at - lead_seconds (or OWED_DEFAULT_LEAD when lead_seconds is NULL) and
-- expiring at starts_at. See docs/api.md.
--
-- The table is FORCE ROW LEVEL SECURITY with the ledger's policy shape: an
-- application writes its items in its tenant's scope, and only the
-- materialiser's cross-tenant read sets the transaction-local bypass flag.

-- +goose Up
CREATE TABLE owed_items (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    text        NOT NULL CHECK (tenant_id <> '' AND length(tenant_id) <= 128),
    recipient    text        NOT NULL CHECK (recipient <> '' AND length(recipient) <= 512),
    channel      text        NOT NULL CHECK (channel <> '' AND length(channel) <= 64),
    kind         text        NOT NULL CHECK (kind <> '' AND length(kind) <= 128),
    ref_id       text        NOT NULL CHECK (ref_id <> '' AND length(ref_id) <= 256),
    starts_at    timestamptz NOT NULL,
    -- The item's own "remind me N seconds before"; NULL takes OWED_DEFAULT_LEAD.
    -- Capped at a week: a lead longer than the look-ahead window is only
    -- noticed once the item enters the window, so it would fire late anyway.
    lead_seconds integer     CHECK (lead_seconds IS NULL OR lead_seconds BETWEEN 0 AND 604800),
    payload      jsonb       NOT NULL DEFAULT '{}'::jsonb CHECK (octet_length(payload::text) <= 65536),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    -- One item per recipient and subject, so an application can upsert
    -- (INSERT ... ON CONFLICT ON CONSTRAINT owed_items_key DO UPDATE).
    CONSTRAINT owed_items_key UNIQUE (tenant_id, recipient, kind, ref_id)
);

-- The materialiser's window scan: items starting within the look-ahead.
CREATE INDEX owed_items_starts_at ON owed_items (starts_at);

ALTER TABLE owed_items ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_items FORCE ROW LEVEL SECURITY;

-- current_setting(..., true) returns NULL (or '' once set elsewhere in the
-- session) when unset, so an unscoped statement matches no row at all.
CREATE POLICY owed_items_tenant ON owed_items
    USING (tenant_id = current_setting('owed.tenant_id', true)
           OR current_setting('owed.bypass_rls', true) = 'on')
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true)
           OR current_setting('owed.bypass_rls', true) = 'on');

-- Applications fill and prune the table as the application role.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_app') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON owed_items TO owed_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE owed_items;
