-- Retention detaches a month before it archives it (internal/archive,
-- retire): the archive then reads tables no service writes, and the drop
-- after it counts nothing. owed_ledger_retention_stage also lifts the
-- staged partitions' forced row-level security, so the owner reads them
-- once detached; owed_ledger_retention_finish drops without counting
-- (bench/ledgerscale: counting a 20M ledger's month took most of the
-- drop's 1.67 s) and takes the month's tenants, to keep it when a hold came
-- since retention decided; owed_ledger_retention_undo attaches a staged
-- month back (internal/ledger/sql/retention.sql).

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_retention_stage(p_partition text)
RETURNS TABLE (from_id bigint, to_id bigint, names text[])
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    v_parent text;
    v_name text;
    v_from bigint;
    v_to bigint;
    v_names text[] := ARRAY[]::text[];
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('owed_ledger_partitions_ensure'));
    IF to_regclass('owed_notifications_retiring') IS NOT NULL
       OR to_regclass('owed_notification_attempts_retiring') IS NOT NULL
       OR to_regclass('owed_receipts_retiring') IS NOT NULL THEN
        RAISE EXCEPTION 'a month is being retired already (a table named *_retiring is there): a retention run stopped midway; see docs/scale.md, "Retention", to finish or undo it'
            USING ERRCODE = 'object_in_use';
    END IF;
    SELECT p.from_id, p.to_id INTO v_from, v_to FROM owed_ledger_partitions() p
     WHERE p.parent = 'owed_notifications' AND p.partition = p_partition;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'owed_ledger_retention_stage: % is no partition of owed_notifications', p_partition
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH v_parent IN ARRAY ARRAY['owed_notifications', 'owed_notification_attempts', 'owed_receipts'] LOOP
        SELECT p.partition INTO v_name FROM owed_ledger_partitions() p
         WHERE p.parent = v_parent AND p.from_id IS NOT DISTINCT FROM v_from AND p.to_id = v_to;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'owed_ledger_retention_stage: % has no partition of the range of %', v_parent, p_partition
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        EXECUTE format('ALTER TABLE %I RENAME TO %I', v_name, v_parent || '_retiring');
        EXECUTE format('ALTER TABLE %I NO FORCE ROW LEVEL SECURITY', v_parent || '_retiring');
        v_names := v_names || v_name;
    END LOOP;
    UPDATE owed_undeliverable u SET notification_id = NULL
     WHERE (v_from IS NULL OR u.notification_id >= v_from) AND u.notification_id < v_to;
    from_id := v_from;
    to_id := v_to;
    names := v_names;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd
DROP FUNCTION owed_ledger_retention_finish(bigint, bigint, text[], bigint, bigint, bigint, text, text, timestamptz, text);
-- +goose StatementBegin
CREATE FUNCTION owed_ledger_retention_undo(p_from bigint, p_to bigint, p_names text[])
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    v_parents text[] := ARRAY['owed_notifications', 'owed_notification_attempts', 'owed_receipts'];
    v_member boolean := pg_has_role(current_user, 'owed_definer', 'MEMBER');
BEGIN
    -- A partition attached back takes a copy of each of its parent's
    -- triggers, which checks EXECUTE on the trigger's function: owed_definer's
    -- (revoked from PUBLIC), so the owner holds the role for the call alone,
    -- as owed_definer_takes_functions does (roles.sql).
    IF NOT v_member THEN
        GRANT owed_definer TO CURRENT_USER;
    END IF;
    FOR i IN 1 .. 3 LOOP
        IF NOT (SELECT c.relispartition FROM pg_class c WHERE c.oid = (v_parents[i] || '_retiring')::regclass) THEN
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', v_parents[i],
                           v_parents[i] || '_retiring', coalesce(p_from::text, 'MINVALUE'), p_to);
        END IF;
        EXECUTE format('ALTER TABLE %I RENAME TO %I', v_parents[i] || '_retiring', p_names[i]);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', p_names[i]);
    END LOOP;
    IF NOT v_member THEN
        REVOKE owed_definer FROM CURRENT_USER;
    END IF;
END
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_ledger_retention_undo(bigint, bigint, text[]) FROM PUBLIC;
-- +goose StatementBegin
CREATE FUNCTION owed_ledger_retention_finish(p_from bigint, p_to bigint, p_names text[], p_tenants text[],
                                             p_rows bigint, p_operator text, p_archive text, p_now timestamptz,
                                             p_reason text)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    v_held text;
BEGIN
    SELECT string_agg(h.tenant_id, ', ' ORDER BY h.tenant_id) INTO v_held
      FROM owed_retention_holds h WHERE h.tenant_id = ANY(p_tenants);
    IF v_held IS NOT NULL THEN
        PERFORM owed_ledger_retention_undo(p_from, p_to, p_names);
        RETURN format('a compliance hold placed while it was archived keeps it: tenant %s', v_held);
    END IF;
    DROP TABLE owed_receipts_retiring, owed_notification_attempts_retiring, owed_notifications_retiring;
    INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
    VALUES (p_now, p_operator, 'retention_drop',
            format('partition=%s ids=[%s, %s) archive=%s', p_names[1], coalesce(p_from::text, 'lowest'), p_to,
                   p_archive),
            least(p_rows, 2147483647)::integer, p_reason, session_user);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_ledger_retention_finish(bigint, bigint, text[], text[], bigint, text, text, timestamptz, text) FROM PUBLIC;

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_ledger_retention_stage(p_partition text)
RETURNS TABLE (from_id bigint, to_id bigint, names text[])
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    v_parent text;
    v_name text;
    v_from bigint;
    v_to bigint;
    v_names text[] := ARRAY[]::text[];
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('owed_ledger_partitions_ensure'));
    IF to_regclass('owed_notifications_retiring') IS NOT NULL
       OR to_regclass('owed_notification_attempts_retiring') IS NOT NULL
       OR to_regclass('owed_receipts_retiring') IS NOT NULL THEN
        RAISE EXCEPTION 'a month is being retired already (a table named *_retiring is there): a retention run stopped midway; see docs/scale.md, "Retention", to finish or undo it'
            USING ERRCODE = 'object_in_use';
    END IF;
    SELECT p.from_id, p.to_id INTO v_from, v_to FROM owed_ledger_partitions() p
     WHERE p.parent = 'owed_notifications' AND p.partition = p_partition;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'owed_ledger_retention_stage: % is no partition of owed_notifications', p_partition
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH v_parent IN ARRAY ARRAY['owed_notifications', 'owed_notification_attempts', 'owed_receipts'] LOOP
        SELECT p.partition INTO v_name FROM owed_ledger_partitions() p
         WHERE p.parent = v_parent AND p.from_id IS NOT DISTINCT FROM v_from AND p.to_id = v_to;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'owed_ledger_retention_stage: % has no partition of the range of %', v_parent, p_partition
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        EXECUTE format('ALTER TABLE %I RENAME TO %I', v_name, v_parent || '_retiring');
        v_names := v_names || v_name;
    END LOOP;
    UPDATE owed_undeliverable u SET notification_id = NULL
     WHERE (v_from IS NULL OR u.notification_id >= v_from) AND u.notification_id < v_to;
    from_id := v_from;
    to_id := v_to;
    names := v_names;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd
DROP FUNCTION owed_ledger_retention_finish(bigint, bigint, text[], text[], bigint, text, text, timestamptz, text);
DROP FUNCTION owed_ledger_retention_undo(bigint, bigint, text[]);
-- +goose StatementBegin
CREATE FUNCTION owed_ledger_retention_finish(p_from bigint, p_to bigint, p_names text[], p_rows bigint,
                                             p_attempts bigint, p_receipts bigint, p_operator text,
                                             p_archive text, p_now timestamptz, p_reason text)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    v_rows bigint;
    v_owed bigint;
    v_attempts bigint;
    v_receipts bigint;
    v_parents text[] := ARRAY['owed_notifications', 'owed_notification_attempts', 'owed_receipts'];
    v_member boolean := pg_has_role(current_user, 'owed_definer', 'MEMBER');
BEGIN
    -- A partition's row-level security is forced with no policy for the
    -- owner (owed_ledger_partitions_ensure): lift it to count.
    FOR i IN 1 .. 3 LOOP
        EXECUTE format('ALTER TABLE %I NO FORCE ROW LEVEL SECURITY', v_parents[i] || '_retiring');
    END LOOP;
    SELECT count(*), count(*) FILTER (WHERE settled_at IS NULL) INTO v_rows, v_owed FROM owed_notifications_retiring;
    SELECT count(*) INTO v_attempts FROM owed_notification_attempts_retiring;
    SELECT count(*) INTO v_receipts FROM owed_receipts_retiring;
    IF v_rows = p_rows AND v_owed = 0 AND v_attempts = p_attempts AND v_receipts = p_receipts THEN
        DROP TABLE owed_receipts_retiring, owed_notification_attempts_retiring, owed_notifications_retiring;
        INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
        VALUES (p_now, p_operator, 'retention_drop',
                format('partition=%s ids=[%s, %s) archive=%s', p_names[1], coalesce(p_from::text, 'lowest'), p_to,
                       p_archive),
                least(v_rows, 2147483647)::integer, p_reason, session_user);
        RETURN NULL;
    END IF;
    -- A partition attached back takes a copy of each of its parent's
    -- triggers, which checks EXECUTE on the trigger's function: owed_definer's
    -- (revoked from PUBLIC), so the owner holds the role for the call alone,
    -- as owed_definer_takes_functions does (roles.sql).
    IF NOT v_member THEN
        GRANT owed_definer TO CURRENT_USER;
    END IF;
    FOR i IN 1 .. 3 LOOP
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', v_parents[i],
                       v_parents[i] || '_retiring', coalesce(p_from::text, 'MINVALUE'), p_to);
        EXECUTE format('ALTER TABLE %I RENAME TO %I', v_parents[i] || '_retiring', p_names[i]);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', p_names[i]);
    END LOOP;
    IF NOT v_member THEN
        REVOKE owed_definer FROM CURRENT_USER;
    END IF;
    RETURN format('it changed while it was archived: %s rows (%s owed), %s attempts, %s receipts, where the archive holds %s rows, %s attempts, %s receipts; the next run archives it again',
                  v_rows, v_owed, v_attempts, v_receipts, p_rows, p_attempts, p_receipts);
END
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_ledger_retention_finish(bigint, bigint, text[], bigint, bigint, bigint, text, text, timestamptz, text) FROM PUBLIC;
