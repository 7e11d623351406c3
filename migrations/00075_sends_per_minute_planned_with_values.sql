-- The console's sends per minute are read with the window's start known
-- to the planner (owed_ledger_sends_per_minute, internal/ledger/sql/operator.sql):
-- the definer becomes PL/pgSQL around a LANGUAGE sql read
-- (owed_ledger_sends_per_minute_rows). As a LANGUAGE sql definer its
-- statement was planned without the parameter's value, and at 20 million
-- attempts the planner's guess (a third of the table) chose a parallel
-- sequential scan for an hour's window. Same signature, same answer.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION owed_ledger_sends_per_minute_rows(p_since timestamptz)
RETURNS TABLE (minute timestamptz, accepted bigint, other bigint)
LANGUAGE sql STABLE AS $$
SELECT date_trunc('minute', finished_at), count(*) FILTER (WHERE outcome = 'accepted'),
       count(*) FILTER (WHERE outcome <> 'accepted')
  FROM owed_notification_attempts
 WHERE finished_at >= $1
 GROUP BY 1 ORDER BY 1
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_ledger_sends_per_minute_rows(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_sends_per_minute_rows(timestamptz) TO owed_definer;
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_sends_per_minute(p_since timestamptz)
RETURNS TABLE (minute timestamptz, accepted bigint, other bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM owed_ledger_sends_per_minute_rows(p_since);
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_sends_per_minute(p_since timestamptz)
RETURNS TABLE (minute timestamptz, accepted bigint, other bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT date_trunc('minute', finished_at), count(*) FILTER (WHERE outcome = 'accepted'),
       count(*) FILTER (WHERE outcome <> 'accepted')
  FROM owed_notification_attempts
 WHERE finished_at >= $1
 GROUP BY 1 ORDER BY 1
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;
DROP FUNCTION owed_ledger_sends_per_minute_rows(timestamptz);
