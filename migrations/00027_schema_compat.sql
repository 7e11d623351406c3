-- Schema compatibility instead of equality (issue 19). A release runs on the
-- previous release's schema and the previous release runs on its schema, so
-- migrations are expand-only (new tables, nullable or defaulted columns, new
-- functions) and a binary accepts a newer schema unless a migration applied
-- on it says otherwise. This table is where it says so: `owedctl migrate`
-- (internal/migrate) writes one row per applied migration on every up and
-- removes the rows of what it rolls back, and every service's /readyz reads
-- it.
--
--   version        the goose version of an applied migration.
--   breaks_before  binaries whose own schema (their newest embedded
--                  migration) is older than this may no longer run once the
--                  migration is applied: a contract migration (one that drops
--                  or changes what older code uses) declares it with a
--                  `-- owed:breaks-before NNN` line; a migration without one
--                  records 0, compatible with every binary that ran on the
--                  schema before it.
--
-- The services' role only reads it; nothing but the migration runner, as the
-- owner, writes it.
-- +goose Up
CREATE TABLE owed_schema_compat (
    version       bigint PRIMARY KEY,
    breaks_before bigint NOT NULL DEFAULT 0 CHECK (breaks_before >= 0 AND breaks_before <= version),
    recorded_at   timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT ON owed_schema_compat TO owed_runtime;

-- +goose Down
DROP TABLE owed_schema_compat;
