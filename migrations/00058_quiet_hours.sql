-- Quiet hours and send windows (issue 31): owed_quiet_hours holds each
-- tenant's send windows (tenant, kind or recipient scope), and a row held
-- outside them records the due time it was asked for in held_from, its
-- due_at being the window's opening (ledger.Schedule, ledger.SetQuietHours),
-- so the sweep's statements are unchanged. An urgent row is never held.
--
-- Expand-only: a new table, a nullable and a defaulted column.

-- +goose Up
CREATE TABLE owed_quiet_hours (
    tenant_id  text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    -- 'tenant', 'kind:<kind>' or 'recipient:<recipient>'.
    scope      text        NOT NULL CHECK (scope = 'tenant' OR scope LIKE 'kind:_%' OR scope LIKE 'recipient:_%'),
    -- The windows, as localtime.ParseWindow reads them ("mon-fri
    -- 08:00-20:00"); checked in Go when they are written.
    windows    text[]      NOT NULL CHECK (cardinality(windows) BETWEEN 1 AND 32),
    -- The zone for a row that has none of its own and whose recipient's
    -- contact names none; NULL is UTC.
    time_zone  text        CHECK (time_zone <> '' AND octet_length(time_zone) <= 64),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope)
);

ALTER TABLE owed_quiet_hours ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_quiet_hours FORCE ROW LEVEL SECURITY;
CREATE POLICY owed_quiet_hours_tenant ON owed_quiet_hours TO owed_runtime
    USING (tenant_id = current_setting('owed.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true));
CREATE POLICY owed_quiet_hours_owner ON owed_quiet_hours TO CURRENT_USER USING (true) WITH CHECK (true);

-- Only the ledger writes windows, so a change always moves the rows it
-- holds; an application's SQL may read them.
GRANT SELECT, INSERT, UPDATE, DELETE ON owed_quiet_hours TO owed_runtime;

ALTER TABLE owed_notifications
    ADD COLUMN held_from timestamptz CHECK (owed_time_in_range(held_from)),
    ADD COLUMN urgent boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE owed_notifications
    DROP COLUMN urgent,
    DROP COLUMN held_from;

DROP TABLE owed_quiet_hours;
