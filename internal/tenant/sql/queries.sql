-- The one statement internal/tenant runs, by name; tenant.go binds it when
-- the package is initialised.

-- name: Enter
-- Enter is the only statement in Go that sets the tenant scope: the
-- transaction-local owed.tenant_id every tenant table's policy compares
-- tenant_id with (set_config's third argument, true, ends it with the
-- transaction).
SELECT set_config('owed.tenant_id', $1, true)
