-- Every SECURITY DEFINER function pins search_path = pg_catalog, public,
-- pg_temp. Before, the path was pg_catalog, public, and a path that does not
-- name pg_temp has it searched first for tables: as the runtime role, a
-- temporary table called owed_notification_attempts made
-- owed_receipt_record write a receipt onto a row of another tenant, and one
-- called owed_api_tokens made owed_token_authenticate answer a forged
-- tenant. Named last, pg_temp is searched after public, where every table a
-- definer function reads is. (Functions and operators are never looked up
-- in pg_temp.)
--
-- ALTER FUNCTION ... SET leaves each body as it is, and the loop takes every
-- definer function of the schema, so the migrations before this one that
-- replace a function keep their own text. Altering a function takes its
-- owner's membership, held for this migration alone, as
-- owed_definer_takes_functions does. Expand-only: every caller calls the
-- same functions with the same arguments.

-- +goose Up
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'public' AND p.prosecdef LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, public, pg_temp', f);
    END LOOP;
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'public' AND p.prosecdef
                AND p.proconfig = ARRAY['search_path=pg_catalog, public, pg_temp'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, public', f);
    END LOOP;
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;
