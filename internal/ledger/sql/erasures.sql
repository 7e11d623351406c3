-- Erasures: one row per erasure of a recipient's data (ledger.Erase,
-- `owedctl erase`, POST /v1/recipients/erase), the audit of a request to
-- forget a person. It never holds what it erased: no recipient, no
-- address, no payload; it says who asked, when, why, in what scope
-- (the channel, or every channel), how much of each table was erased, and
-- which ledger rows are now tombstones, so an auditor can show the
-- delivery facts that remain, and `owedctl archive restore` can erase the
-- same rows again in a file written before the request.
CREATE TABLE owed_erasures (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    -- NULL: every channel.
    channel          text        CHECK (channel <> '' AND octet_length(channel) <= 64),
    -- Who asked: "owedctl:<operator>" or "api:<token>", and why.
    requested_by     text        NOT NULL CHECK (requested_by <> '' AND octet_length(requested_by) <= 256),
    reason           text        NOT NULL CHECK (octet_length(reason) <= 1024),
    at               timestamptz NOT NULL,
    -- The ledger rows made tombstones (cancelled first when still owed)
    -- and those left alone because a worker was sending them at that
    -- moment: their send's outcome comes first, and erasing again after
    -- it settles them.
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

-- The runtime role erases in a tenant's scope and appends the line; no
-- role edits or removes one.
GRANT SELECT, INSERT ON owed_erasures TO owed_runtime;

-- owed_erasure_audited puts every erasure on the operators' trail too
-- (owed_operator_audit), whoever asked (owedctl erase, a tenant's
-- POST /v1/recipients/erase), so on-call reads every write to the ledger
-- an operator or a tenant's erasure made in one place. The line names the
-- requester, the tenant, the erasure and the rows made tombstones, never
-- the recipient.
CREATE FUNCTION owed_erasure_audited() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
    VALUES (NEW.at, NEW.requested_by, 'erase',
            format('tenant=%s erasure=%s channel=%s', NEW.tenant_id, NEW.id, coalesce(NEW.channel, 'every')),
            cardinality(NEW.notification_ids), NEW.reason, session_user);
    RETURN NULL;
END
$$;
ALTER FUNCTION owed_erasure_audited() OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_erasure_audited() FROM PUBLIC;
-- As every definer function the migrations hand to owed_definer
-- (owed_definer_takes_functions); a trigger function cannot be called
-- but as its trigger.
GRANT EXECUTE ON FUNCTION owed_erasure_audited() TO owed_runtime;

CREATE TRIGGER owed_erasures_audited
    AFTER INSERT ON owed_erasures
    FOR EACH ROW
    EXECUTE FUNCTION owed_erasure_audited();
