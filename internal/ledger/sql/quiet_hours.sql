-- Quiet hours: each tenant's send windows on the recipient's wall clock
-- (internal/localtime.Window), for the whole tenant, for one kind, or for
-- one recipient; the most specific scope that names windows applies
-- (recipient, then kind, then tenant). A row due outside every window of
-- its scope is held: ledger.Schedule moves its due_at to the window's next
-- opening and keeps the time asked in held_from (owed_notifications), so
-- the sweep's lease, pace, fairness and expiry read the row's effective
-- due time and need no rule of their own. ledger.SetQuietHours writes a
-- scope and moves the tenant's pending rows to the new rule in the same
-- transaction.
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
