-- Every statement the SQL recipient resolver runs (internal/resolve), by
-- name; resolve.go binds each when the package is initialised.

-- name: Contact
-- Contact reads a recipient's address on a channel, and whether the
-- contact opted out, in the caller's tenant scope: one read by the table's
-- key.
SELECT address, opted_out FROM owed_contacts WHERE tenant_id = $1 AND recipient = $2 AND channel = $3
