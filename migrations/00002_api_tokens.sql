-- Tenant API tokens for the scheduling API. A token is bound to one tenant and
-- can only ever act in that tenant's scope.
--
-- Only the SHA-256 of a token is stored. A token is 32 bytes from the
-- operating system's CSPRNG, so there is no dictionary to walk and 2^256
-- candidates to try: a slow KDF (bcrypt, argon2) protects low-entropy
-- passwords against guessing and buys nothing here, while costing every API
-- request tens of milliseconds. A plain hash also lets the lookup be one
-- unique-index probe.
--
-- This table is deliberately NOT under row-level security: a token is looked
-- up by its hash before the request's tenant is known (the token is what names
-- the tenant). Nothing but hashes is stored, and the API never returns a hash,
-- so reading the table never yields a usable credential.

-- +goose Up
CREATE TABLE api_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    text        NOT NULL CHECK (tenant_id <> '' AND length(tenant_id) <= 128),
    -- sha256 of the whole plaintext token, prefix included.
    token_hash   bytea       NOT NULL CHECK (octet_length(token_hash) = 32),
    name         text        NOT NULL DEFAULT '' CHECK (length(name) <= 128),
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- A revoked token stays as a record of who held access and when; it never
    -- authenticates again.
    revoked_at   timestamptz,
    -- Updated at most once a minute per token, so a busy token does not turn
    -- every API request into a write.
    last_used_at timestamptz,
    CONSTRAINT api_tokens_hash UNIQUE (token_hash)
);

-- `owedctl tokens list --tenant T`.
CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id, id);

-- The application role authenticates requests (SELECT), and owedctl run as
-- that role creates, touches and revokes tokens (INSERT, UPDATE). Tokens are
-- revoked, never deleted, so DELETE is not granted.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_app') THEN
        GRANT SELECT, INSERT, UPDATE ON api_tokens TO owed_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE api_tokens;
