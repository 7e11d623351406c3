-- Every statement internal/migrate runs itself, by name; compat.go binds
-- each to a variable when the package is initialised. goose runs the
-- migrations and keeps goose_db_version; these read it and keep
-- owed_schema_compat (versions.sql) in line with it.

-- name: SchemaVersion
-- SchemaVersion is the newest applied migration: the database's schema.
SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied

-- name: CompatExists
-- CompatExists says whether owed_schema_compat exists: a database migrated
-- before it was added has none, and nothing in it declares a break.
SELECT to_regclass('public.owed_schema_compat') IS NOT NULL

-- name: CompatRequires
-- CompatRequires is the oldest binary schema the applied migrations allow
-- (0: every one).
SELECT coalesce(max(breaks_before), 0) FROM owed_schema_compat

-- name: AnnounceContract
-- AnnounceContract records a pending contract migration ($1, breaking
-- binaries older than $2) before it runs.
INSERT INTO owed_schema_compat (version, breaks_before) VALUES ($1, $2)
    ON CONFLICT (version) DO UPDATE SET breaks_before = excluded.breaks_before

-- name: ForgetRolledBack
-- ForgetRolledBack removes the rows of versions goose no longer lists as
-- applied (rolled back, or announced and then not applied).
DELETE FROM owed_schema_compat c WHERE NOT EXISTS
    (SELECT 1 FROM goose_db_version g WHERE g.version_id = c.version AND g.is_applied)

-- name: RecordApplied
-- RecordApplied records an applied migration ($1) and the binaries it
-- breaks ($2), keeping a row already there.
INSERT INTO owed_schema_compat (version, breaks_before) VALUES ($1, $2)
    ON CONFLICT (version) DO NOTHING
