-- The token administrator may write operator audit lines only for its own
-- token actions (token_*): owed_operator_audit_record refuses it any other
-- action with insufficient_privilege, so it cannot forge an operator's
-- hold, pause or dead-letter delete (internal/ledger/sql/operator.sql).
-- Same signature, owner and grants; the previous release's callers are
-- operator logins and the token administrator's token lines.

-- +goose Up
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_operator_audit_record(p_now timestamptz, p_operator text, p_action text, p_target text,
                                           p_count integer, p_reason text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_id bigint;
BEGIN
    IF NOT pg_has_role(session_user, 'owed_operator', 'MEMBER') AND p_action NOT LIKE 'token\_%' THEN
        RAISE EXCEPTION 'permission denied to record the operator action %: login % may record only token actions',
            p_action, session_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
    VALUES (coalesce(p_now, now()), p_operator, p_action, p_target, p_count, p_reason, session_user)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_operator_audit_record(p_now timestamptz, p_operator text, p_action text, p_target text,
                                           p_count integer, p_reason text) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
VALUES (coalesce($1, now()), $2, $3, $4, $5, $6, session_user)
RETURNING id
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;
