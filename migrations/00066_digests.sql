-- Digests (issue 31): owed_digests holds the kinds each tenant declared
-- digestible and their windows, and a row in a digest names it in
-- digest_id and keeps the due time it was asked for in digest_from, its
-- due_at being the digest's send time (internal/ledger/sql/digests.sql,
-- ledger.Schedule). owed_sweep_digests tells the sweep which leased rows
-- are in a digest. The index on the digests' owed members is built
-- CONCURRENTLY by the next migration.
--
-- Expand-only: a new table, two nullable columns and a new function; the
-- previous release writes no digest and reads none.

-- +goose Up
CREATE TABLE owed_digests (
    tenant_id  text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    kind       text        NOT NULL CHECK (kind <> '' AND octet_length(kind) <= 256),
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

ALTER TABLE owed_notifications
    ADD COLUMN digest_id bigint,
    ADD COLUMN digest_from timestamptz CHECK (owed_time_in_range(digest_from));

CREATE FUNCTION owed_sweep_digests(p_ids bigint[]) RETURNS TABLE (id bigint, digest_id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT n.id, n.digest_id FROM owed_notifications n WHERE n.id = ANY ($1) AND n.digest_id IS NOT NULL
$$;
CALL owed_definer_takes_functions(ARRAY['owed_sweep_digests']);

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
DROP FUNCTION owed_sweep_digests(bigint[]);
REVOKE owed_definer FROM CURRENT_USER;

ALTER TABLE owed_notifications
    DROP COLUMN digest_from,
    DROP COLUMN digest_id;

DROP TABLE owed_digests;
