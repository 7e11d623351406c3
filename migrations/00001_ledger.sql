-- The ledger: one row per owed notification, and one row per send tried.
-- Both tables are FORCE ROW LEVEL SECURITY: even the owning role sees only
-- the tenant named by the transaction-local setting owed.tenant_id, unless the
-- transaction set owed.bypass_rls = 'on' for a cross-tenant statement.

-- +goose Up
CREATE TABLE notifications (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id           text        NOT NULL CHECK (tenant_id <> '' AND length(tenant_id) <= 128),
    recipient           text        NOT NULL CHECK (recipient <> '' AND length(recipient) <= 512),
    channel             text        NOT NULL CHECK (channel <> '' AND length(channel) <= 64),
    kind                text        NOT NULL CHECK (kind <> '' AND length(kind) <= 128),
    ref_id              text        NOT NULL CHECK (ref_id <> '' AND length(ref_id) <= 256),
    due_at              timestamptz NOT NULL,
    expires_at          timestamptz CHECK (expires_at IS NULL OR expires_at > due_at),
    payload             jsonb       NOT NULL DEFAULT '{}'::jsonb CHECK (octet_length(payload::text) <= 65536),
    state               text        NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'leased', 'queued', 'sending',
                                         'delivered', 'skipped', 'expired', 'failed', 'cancelled')),
    attempts            integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    lease_until         timestamptz,
    claimed_at          timestamptz,
    published_at        timestamptz,
    delivered_at        timestamptz,
    settled_at          timestamptz,
    provider            text,
    provider_message_id text,
    last_error          text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    -- Scheduling the same thing twice is one row.
    CONSTRAINT notifications_schedule_key UNIQUE (tenant_id, recipient, kind, ref_id, due_at),
    -- settled_at is set exactly when the state is final, so the partial
    -- indexes below can use it as "still owed".
    CONSTRAINT notifications_settled_state CHECK (
        (settled_at IS NOT NULL) = (state IN ('delivered', 'skipped', 'expired', 'failed', 'cancelled'))),
    -- A delivered row always says when.
    CONSTRAINT notifications_delivered_at CHECK (state <> 'delivered' OR delivered_at IS NOT NULL)
);

-- Exactly what the sweeper's lease reads: owed rows, oldest first. Settled
-- rows leave the index, so the lease costs O(rows owed), not O(ledger).
CREATE INDEX notifications_owed_due ON notifications (due_at) WHERE settled_at IS NULL;

-- The expiry pass reads owed rows that carry an expiry, soonest first.
CREATE INDEX notifications_owed_expiry ON notifications (expires_at)
    WHERE settled_at IS NULL AND expires_at IS NOT NULL;

-- Operator and API look-ups: "was this recipient notified about this ref".
CREATE INDEX notifications_tenant_ref ON notifications (tenant_id, ref_id);

CREATE TABLE notification_attempts (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    notification_id     bigint      NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    tenant_id           text        NOT NULL,
    attempt             integer     NOT NULL CHECK (attempt >= 1),
    provider            text        NOT NULL,
    started_at          timestamptz NOT NULL,
    finished_at         timestamptz NOT NULL,
    outcome             text        NOT NULL
                        CHECK (outcome IN ('accepted', 'skipped', 'transient', 'permanent')),
    provider_message_id text,
    http_status         integer,
    error               text,
    -- The row was claimed again after a worker died mid-send: the provider
    -- may have accepted the first send, so this one may be a duplicate.
    possible_duplicate  boolean     NOT NULL DEFAULT false
);
CREATE INDEX notification_attempts_notification ON notification_attempts (notification_id, attempt);

ALTER TABLE notifications ENABLE ROW LEVEL SECURITY;
ALTER TABLE notifications FORCE ROW LEVEL SECURITY;
ALTER TABLE notification_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE notification_attempts FORCE ROW LEVEL SECURITY;

-- current_setting(..., true) returns NULL (or '' once set elsewhere in the
-- session) when unset, so an unscoped statement matches no row at all.
CREATE POLICY notifications_tenant ON notifications
    USING (tenant_id = current_setting('owed.tenant_id', true)
           OR current_setting('owed.bypass_rls', true) = 'on')
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true)
           OR current_setting('owed.bypass_rls', true) = 'on');
CREATE POLICY notification_attempts_tenant ON notification_attempts
    USING (tenant_id = current_setting('owed.tenant_id', true)
           OR current_setting('owed.bypass_rls', true) = 'on')
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true)
           OR current_setting('owed.bypass_rls', true) = 'on');

-- The application role (owed_app by convention) gets DML only. It is granted
-- when the role exists so that migrating a database without it still works.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_app') THEN
        GRANT SELECT, INSERT, UPDATE ON notifications, notification_attempts TO owed_app;
        -- Read access to goose's version table lets /readyz check that the
        -- schema is at the version the binary expects.
        GRANT SELECT ON goose_db_version TO owed_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE notification_attempts;
DROP TABLE notifications;
