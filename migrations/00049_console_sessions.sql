-- The console's sessions in a table (owed_console_sessions), so logout
-- revokes a session on every sweeper replica and a restart forgets none:
-- the review found a cookie still opened /console/ for its 12 h after
-- logout. Only the SHA-256 of a session's id is stored. On-call's role
-- alone (owed_operator) reads and writes it. Expand-only: no release reads
-- it yet.

-- +goose Up
CREATE TABLE owed_console_sessions (
    id_hash    bytea       PRIMARY KEY CHECK (octet_length(id_hash) = 32),
    operator   text        NOT NULL CHECK (operator <> '' AND octet_length(operator) <= 256),
    -- Where the login came from (the client's address), for the sessions
    -- page.
    source     text        NOT NULL CHECK (octet_length(source) <= 256),
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL CHECK (expires_at > created_at),
    revoked_at timestamptz
);

-- DELETE: a new session forgets the ones that ended a week before.
GRANT SELECT, INSERT, UPDATE, DELETE ON owed_console_sessions TO owed_operator;

-- owed_console_session_create records a session that lets its cookie in
-- until p_expires, and forgets the sessions that ended (expired or were
-- revoked) more than a week before p_now. Parameters: the hash of the
-- session's id, the operator, the source, and the clock (p_now, NULL: the
-- database's).
-- +goose StatementBegin
CREATE FUNCTION owed_console_session_create(p_id_hash bytea, p_operator text, p_source text, p_now timestamptz,
                                            p_expires timestamptz) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, public, pg_temp AS $$
DELETE FROM owed_console_sessions
 WHERE least(expires_at, coalesce(revoked_at, expires_at)) < coalesce($4, now()) - interval '7 days';
INSERT INTO owed_console_sessions (id_hash, operator, source, created_at, expires_at)
VALUES ($1, $2, $3, coalesce($4, now()), $5);
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_console_session_create(bytea, text, text, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_console_session_create(bytea, text, text, timestamptz, timestamptz) TO owed_operator;

-- owed_console_session_check answers the session a cookie names while it
-- lets the cookie in (not revoked, not expired at p_now), else no row.
-- +goose StatementBegin
CREATE FUNCTION owed_console_session_check(p_id_hash bytea, p_now timestamptz)
RETURNS TABLE (operator text, source text, created_at timestamptz, expires_at timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
SELECT s.operator, s.source, s.created_at, s.expires_at FROM owed_console_sessions s
 WHERE s.id_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > coalesce($2, now())
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_console_session_check(bytea, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_console_session_check(bytea, timestamptz) TO owed_operator;

-- owed_console_session_revoke ends the session at p_now and answers whether
-- it was active: revoking it again, or an expired one, changes nothing.
-- +goose StatementBegin
CREATE FUNCTION owed_console_session_revoke(p_id_hash bytea, p_now timestamptz) RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, public, pg_temp AS $$
WITH revoked AS (
    UPDATE owed_console_sessions SET revoked_at = coalesce($2, now())
     WHERE id_hash = $1 AND revoked_at IS NULL AND expires_at > coalesce($2, now())
    RETURNING 1
)
SELECT count(*) > 0 FROM revoked
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_console_session_revoke(bytea, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_console_session_revoke(bytea, timestamptz) TO owed_operator;

-- owed_console_session_revoke_operator ends every active session of the
-- operator (a departing operator, a leaked laptop) and answers how many.
-- +goose StatementBegin
CREATE FUNCTION owed_console_session_revoke_operator(p_operator text, p_now timestamptz) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, public, pg_temp AS $$
WITH revoked AS (
    UPDATE owed_console_sessions SET revoked_at = coalesce($2, now())
     WHERE operator = $1 AND revoked_at IS NULL AND expires_at > coalesce($2, now())
    RETURNING 1
)
SELECT count(*) FROM revoked
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_console_session_revoke_operator(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_console_session_revoke_operator(text, timestamptz) TO owed_operator;

-- owed_console_session_list answers the sessions active at p_now, newest
-- first, each named by its hash.
-- +goose StatementBegin
CREATE FUNCTION owed_console_session_list(p_now timestamptz)
RETURNS TABLE (id_hash bytea, operator text, source text, created_at timestamptz, expires_at timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
SELECT s.id_hash, s.operator, s.source, s.created_at, s.expires_at FROM owed_console_sessions s
 WHERE s.revoked_at IS NULL AND s.expires_at > coalesce($1, now())
 ORDER BY s.created_at DESC, s.id_hash
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_console_session_list(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_console_session_list(timestamptz) TO owed_operator;

-- +goose Down
DROP FUNCTION owed_console_session_list(timestamptz);
DROP FUNCTION owed_console_session_revoke_operator(text, timestamptz);
DROP FUNCTION owed_console_session_revoke(bytea, timestamptz);
DROP FUNCTION owed_console_session_check(bytea, timestamptz);
DROP FUNCTION owed_console_session_create(bytea, text, text, timestamptz, timestamptz);
DROP TABLE owed_console_sessions;
