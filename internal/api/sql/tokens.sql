-- Tenant API tokens for the scheduling API. A token is bound to one tenant
-- and only ever acts in that tenant's scope.
--
-- Only the SHA-256 of a token is stored. A token is 32 bytes from the
-- operating system's CSPRNG, so there is no dictionary to walk and 2^256
-- candidates to try: a slow KDF (bcrypt, argon2) protects low-entropy
-- passwords against guessing and buys nothing here, while costing every
-- API request tens of milliseconds. A plain hash also makes the look-up one
-- unique-index probe.
--
-- The table has no row-level security: a token is looked up by its hash
-- before the request's tenant is known (the token is what names the
-- tenant). It holds nothing but hashes, and the API never returns one.
CREATE TABLE owed_api_tokens (
    -- The sequence keeps its name from before the owed_ prefix.
    id           bigint      GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME api_tokens_id_seq) PRIMARY KEY,
    tenant_id    text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    -- sha256 of the whole plaintext token, prefix included.
    token_hash   bytea       NOT NULL CHECK (octet_length(token_hash) = 32),
    name         text        NOT NULL DEFAULT '' CHECK (octet_length(name) <= 128),
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- A revoked token stays as a record of who held access and when; it
    -- never authenticates again.
    revoked_at   timestamptz,
    -- Updated at most once a minute per token, so a busy token does not
    -- turn every API request into a write.
    last_used_at timestamptz,
    CONSTRAINT owed_api_tokens_hash UNIQUE (token_hash)
);

-- `owedctl tokens list --tenant T`.
CREATE INDEX owed_api_tokens_tenant ON owed_api_tokens (tenant_id, id);

-- Creating, revoking and listing tokens is owedctl tokens', as
-- owed_token_admin, by plain SQL. Tokens are revoked, never deleted. The
-- runtime role has nothing on the table: the API reads it only through the
-- two functions below, whose owner may read it and write last_used_at.
GRANT SELECT, INSERT, UPDATE ON owed_api_tokens TO owed_token_admin;
GRANT SELECT, UPDATE (last_used_at) ON owed_api_tokens TO owed_definer;

-- owed_token_authenticate resolves a token by its hash: the token's id and
-- tenant, and whether last_used_at is older than p_resolution seconds,
-- never another row.
CREATE FUNCTION owed_token_authenticate(p_hash bytea, p_now timestamptz, p_resolution double precision)
RETURNS TABLE (id bigint, tenant_id text, stale boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT t.id, t.tenant_id, t.last_used_at IS NULL OR t.last_used_at < coalesce($2, now()) - make_interval(secs => $3)
  FROM owed_api_tokens t WHERE t.token_hash = $1 AND t.revoked_at IS NULL
$$;
ALTER FUNCTION owed_token_authenticate(bytea, timestamptz, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_token_authenticate(bytea, timestamptz, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_token_authenticate(bytea, timestamptz, double precision) TO owed_runtime;

-- owed_token_touch refreshes last_used_at. The staleness is checked again
-- so concurrent requests write once.
CREATE FUNCTION owed_token_touch(p_id bigint, p_now timestamptz, p_resolution double precision) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
UPDATE owed_api_tokens SET last_used_at = coalesce($2, now())
 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < coalesce($2, now()) - make_interval(secs => $3))
$$;
ALTER FUNCTION owed_token_touch(bigint, timestamptz, double precision) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_token_touch(bigint, timestamptz, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_token_touch(bigint, timestamptz, double precision) TO owed_runtime;
