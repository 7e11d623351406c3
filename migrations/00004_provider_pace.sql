-- The shared pace: one row per provider account, holding the GCRA state that
-- every worker process sending through that account reserves its sends from
-- (internal/pace). It is not tenant data: an account's pace is shared by all
-- tenants by design, so the table has no row-level security. It holds no
-- recipient, payload or credential, only the account's name and two instants.

-- +goose Up
CREATE TABLE provider_pace (
    -- The provider's Name(), e.g. "sandbox" or "sendgrid:acct".
    account      text        PRIMARY KEY CHECK (account <> '' AND length(account) <= 128),
    -- GCRA's theoretical arrival time: the start of the next free slot is
    -- greatest(tat, now, paused_until), and taking it moves tat one interval
    -- past that start.
    tat          timestamptz NOT NULL,
    -- Set from a 429's Retry-After: no slot starts before it. NULL when the
    -- account was never paused; greatest() ignores NULL.
    paused_until timestamptz,
    updated_at   timestamptz NOT NULL
);

-- The application role (owed_app by convention) gets DML only, and no DELETE:
-- forgetting a pace row would let the next reservation start a fresh
-- schedule. It is granted when the role exists so that migrating a database
-- without it still works.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_app') THEN
        GRANT SELECT, INSERT, UPDATE ON provider_pace TO owed_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE provider_pace;
