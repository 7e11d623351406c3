-- The operator console (internal/console, issue 18): an audit trail of what
-- operators did, and the dashboard's chart of the last hour's sends.
--
-- owed_operator_audit is not tenant data: one row per operator action
-- (a dead-letter redrive or delete, a pause, reading a tenant's payload),
-- with who, what, the filter or ids it named, how many things it touched
-- and the reason given. The runtime role reads it and writes it only
-- through owed_operator_audit_record, which can only append: no operator
-- action edits or removes what an earlier one recorded.
--
-- owed_ledger_sends_per_minute counts, across every tenant, the send
-- attempts that finished in each minute since p_since: accepted, and the
-- rest (skipped, transient, permanent). The attempts' index on finished_at
-- is migrations/00032, built concurrently.

-- +goose Up
CREATE TABLE owed_operator_audit (
    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL,
    operator text        NOT NULL CHECK (operator <> '' AND octet_length(operator) <= 256),
    action   text        NOT NULL CHECK (action <> '' AND octet_length(action) <= 64),
    target   text        NOT NULL CHECK (octet_length(target) <= 4096),
    count    integer     NOT NULL CHECK (count >= 0),
    reason   text        NOT NULL CHECK (octet_length(reason) <= 1024)
);
CREATE INDEX owed_operator_audit_at ON owed_operator_audit (at);
GRANT SELECT ON owed_operator_audit TO owed_runtime;
GRANT SELECT, INSERT ON owed_operator_audit TO owed_definer;

-- +goose StatementBegin
CREATE FUNCTION owed_operator_audit_record(p_now timestamptz, p_operator text, p_action text, p_target text,
                                           p_count integer, p_reason text) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
INSERT INTO owed_operator_audit (at, operator, action, target, count, reason)
VALUES (coalesce($1, now()), $2, $3, $4, $5, $6)
RETURNING id
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_ledger_sends_per_minute(p_since timestamptz)
RETURNS TABLE (minute timestamptz, accepted bigint, other bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT date_trunc('minute', finished_at), count(*) FILTER (WHERE outcome = 'accepted'),
       count(*) FILTER (WHERE outcome <> 'accepted')
  FROM owed_notification_attempts
 WHERE finished_at >= $1
 GROUP BY 1 ORDER BY 1
$$;
-- +goose StatementEnd

CALL owed_definer_takes_functions(ARRAY['owed_operator_audit_record', 'owed_ledger_sends_per_minute']);

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
DROP FUNCTION owed_ledger_sends_per_minute(timestamptz);
DROP FUNCTION owed_operator_audit_record(timestamptz, text, text, text, integer, text);
REVOKE owed_definer FROM CURRENT_USER;
DROP TABLE owed_operator_audit;
