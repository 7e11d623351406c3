-- Every erasure is on the operators' trail too: an AFTER INSERT trigger on
-- owed_erasures writes its owed_operator_audit line (action erase), whoever
-- asked (internal/ledger/sql/erasures.sql). Expand-only.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION owed_erasure_audited() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
    VALUES (NEW.at, NEW.requested_by, 'erase',
            format('tenant=%s erasure=%s channel=%s', NEW.tenant_id, NEW.id, coalesce(NEW.channel, 'every')),
            cardinality(NEW.notification_ids), NEW.reason, session_user);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- The trigger is made while its function is still the migration's: a
-- trigger's function is checked for EXECUTE when the trigger is created,
-- not when it fires.
CREATE TRIGGER owed_erasures_audited
    AFTER INSERT ON owed_erasures
    FOR EACH ROW
    EXECUTE FUNCTION owed_erasure_audited();
REVOKE EXECUTE ON FUNCTION owed_erasure_audited() FROM PUBLIC;
CALL owed_definer_takes_functions(ARRAY['owed_erasure_audited']);

-- +goose Down
DROP TRIGGER owed_erasures_audited ON owed_erasures;
GRANT owed_definer TO CURRENT_USER;
DROP FUNCTION owed_erasure_audited();
REVOKE owed_definer FROM CURRENT_USER;
