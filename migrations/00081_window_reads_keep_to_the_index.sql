-- The console's sends per minute (owed_ledger_sends_per_minute_rows) and
-- the sweep's send rates (owed_sweep_send_rates, now reading through
-- owed_sweep_send_rates_rows) run their reads with enable_seqscan off.
-- Early in a month its partition of the attempts holds little but their
-- window, and the planner read that partition whole: bench/ledgerscale
-- counted one sequential scan per call of the sends per minute, a read
-- that grows with the month after it. The sends per minute's read becomes
-- PL/pgSQL, so it is still planned with its window's start. Same
-- signatures, same answers.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION owed_sweep_send_rates_rows(p_now timestamptz, p_window double precision, p_count_up_to integer)
RETURNS TABLE (provider text, sends bigint)
LANGUAGE plpgsql STABLE SET enable_seqscan = off AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT split_part(a.provider, ':', 1), count(*)
      FROM (SELECT provider FROM owed_notification_attempts
             WHERE finished_at > coalesce($1, now()) - make_interval(secs => $2)
               AND finished_at <= coalesce($1, now())
             LIMIT $3) a
     GROUP BY 1;
END
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_sweep_send_rates_rows(timestamptz, double precision, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_sweep_send_rates_rows(timestamptz, double precision, integer) TO owed_definer;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_sends_per_minute_rows(p_since timestamptz)
RETURNS TABLE (minute timestamptz, accepted bigint, other bigint)
LANGUAGE plpgsql STABLE SET enable_seqscan = off AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT date_trunc('minute', finished_at), count(*) FILTER (WHERE outcome = 'accepted'),
           count(*) FILTER (WHERE outcome <> 'accepted')
      FROM owed_notification_attempts
     WHERE finished_at >= $1
     GROUP BY 1 ORDER BY 1;
END
$$;
-- +goose StatementEnd
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_send_rates(p_now timestamptz, p_window double precision, p_count_up_to integer)
RETURNS TABLE (provider text, sends bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM owed_sweep_send_rates_rows(p_now, p_window, p_count_up_to);
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_send_rates(p_now timestamptz, p_window double precision, p_count_up_to integer)
RETURNS TABLE (provider text, sends bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT split_part(a.provider, ':', 1), count(*)
      FROM (SELECT provider FROM owed_notification_attempts
             WHERE finished_at > coalesce($1, now()) - make_interval(secs => $2)
               AND finished_at <= coalesce($1, now())
             LIMIT $3) a
     GROUP BY 1;
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;
DROP FUNCTION owed_sweep_send_rates_rows(timestamptz, double precision, integer);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_sends_per_minute_rows(p_since timestamptz)
RETURNS TABLE (minute timestamptz, accepted bigint, other bigint)
LANGUAGE sql STABLE AS $$
SELECT date_trunc('minute', finished_at), count(*) FILTER (WHERE outcome = 'accepted'),
       count(*) FILTER (WHERE outcome <> 'accepted')
  FROM owed_notification_attempts
 WHERE finished_at >= $1
 GROUP BY 1 ORDER BY 1
$$;
-- +goose StatementEnd
