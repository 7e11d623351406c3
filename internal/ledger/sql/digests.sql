-- Digests: a tenant declares a kind digestible with a window
-- (ledger.SetDigest, PUT /v1/digests), and rows of that kind to one
-- recipient on one channel whose due times fall within one window go out
-- as one provider call listing them. ledger.Schedule puts a row in its
-- digest when it is written: the row keeps the due time it was asked for
-- in digest_from and names its digest in digest_id (owed_notifications),
-- and its due_at is the digest's send time, the window's close (or
-- earlier, when a member's expiry falls inside the window), shared by
-- every member. So the sweep's lease, fairness, pace and expiry read the
-- rows' effective due time and need no rule of their own; the sweep only
-- publishes one message per digest (owed_sweep_digests), and the worker
-- claims, sends and settles the digest's members together.
CREATE TABLE owed_digests (
    tenant_id  text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    kind       text        NOT NULL CHECK (kind <> '' AND octet_length(kind) <= 256),
    -- The window in seconds: a day at most, since every member waits up
    -- to that long for the digest.
    window_s   integer     NOT NULL CHECK (window_s BETWEEN 1 AND 86400),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, kind)
);

ALTER TABLE owed_digests ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_digests FORCE ROW LEVEL SECURITY;
CREATE POLICY owed_digests_tenant ON owed_digests TO owed_runtime
    USING (tenant_id = current_setting('owed.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true));
CREATE POLICY owed_digests_owner ON owed_digests TO CURRENT_USER USING (true) WITH CHECK (true);

GRANT SELECT, INSERT, UPDATE, DELETE ON owed_digests TO owed_runtime;

-- owed_sweep_digests answers, of the rows p_ids the sweep leased, those in
-- a digest with its id, so the sweep publishes one message per digest. It
-- answers ids only, never a row's recipient or payload, like the lease.
CREATE FUNCTION owed_sweep_digests(p_ids bigint[]) RETURNS TABLE (id bigint, digest_id bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT n.id, n.digest_id FROM owed_notifications n WHERE n.id = ANY ($1) AND n.digest_id IS NOT NULL;
END
$$;
ALTER FUNCTION owed_sweep_digests(bigint[]) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_sweep_digests(bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_digests(bigint[]) TO owed_runtime;
