-- Retention (internal/archive, retention.go; `owedctl retention run`):
-- the ledger's months are archived and dropped whole once every row in
-- them is settled and older than the retention of its tenant, unless a
-- compliance hold keeps them. Retention runs as the schema's owner, so
-- only the owner reads and writes these.

-- A compliance hold on a tenant: while it stands, retention keeps every
-- month holding any of the tenant's rows, and says which hold kept it. A
-- hold never moves rows (docs/scale.md says why), so it keeps the months
-- whole, the other tenants' rows in them included.
CREATE TABLE owed_retention_holds (
    tenant_id text        PRIMARY KEY CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    reason    text        NOT NULL CHECK (reason <> '' AND octet_length(reason) <= 1024),
    -- Who placed it, as they said, and the database login that did.
    held_by   text        NOT NULL CHECK (held_by <> '' AND octet_length(held_by) <= 256),
    login     text        NOT NULL DEFAULT session_user CHECK (octet_length(login) <= 64),
    since     timestamptz NOT NULL
);

ALTER TABLE owed_retention_holds ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_retention_holds FORCE ROW LEVEL SECURITY;
CREATE POLICY owed_retention_holds_owner ON owed_retention_holds TO CURRENT_USER USING (true) WITH CHECK (true);

-- owed_ledger_partitions_restore makes room for an archive's id range
-- [p_from, p_to) that retention dropped: one partition of each of the
-- ledger, its attempts and its receipts holding exactly the range (named
-- for its month when it is one, else restored_<from>_<to>), row-level
-- security forced and no grant, as owed_ledger_partitions_ensure makes
-- them, so `owedctl archive restore` writes the rows back readable. A
-- range the partitions hold whole is left as it is; one partly held is
-- refused, since a partition cannot overlap another. It answers how many
-- partitions it created.
CREATE FUNCTION owed_ledger_partitions_restore(p_from bigint, p_to bigint) RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    v_table text;
    v_k bigint := p_from / 100000000000;
    v_name text;
    v_held numeric;
    v_made integer := 0;
    v_member boolean := pg_has_role(current_user, 'owed_definer', 'MEMBER');
BEGIN
    IF p_from IS NULL OR p_to IS NULL OR p_from >= p_to THEN
        RAISE EXCEPTION 'owed_ledger_partitions_restore: [%, %) is no id range', p_from, p_to
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_name := CASE WHEN p_from = v_k * 100000000000 AND p_to = p_from + 100000000000 AND v_k >= 0
                   THEN to_char(make_date(2000 + (v_k / 12)::integer, (v_k % 12)::integer + 1, 1), '"y"YYYY"m"MM')
                   ELSE 'restored_' || p_from || '_' || p_to END;
    PERFORM pg_advisory_xact_lock(hashtext('owed_ledger_partitions_ensure'));
    -- A partition made or attached takes a copy of each of its parent's
    -- triggers, which checks EXECUTE on the trigger's function: owed_definer's
    -- (revoked from PUBLIC), so the owner holds the role for the call alone,
    -- as owed_definer_takes_functions does (roles.sql).
    IF NOT v_member THEN
        GRANT owed_definer TO CURRENT_USER;
    END IF;
    FOREACH v_table IN ARRAY ARRAY['owed_notifications', 'owed_notification_attempts', 'owed_receipts'] LOOP
        -- The ids of the range the partitions hold (they never overlap).
        SELECT coalesce(sum(least(p.to_id, p_to) - greatest(coalesce(p.from_id, p_from), p_from)), 0) INTO v_held
          FROM owed_ledger_partitions() p
         WHERE p.parent = v_table AND coalesce(p.from_id < p_to, true) AND p.to_id > p_from;
        CONTINUE WHEN v_held = p_to - p_from;
        IF v_held > 0 THEN
            RAISE EXCEPTION 'owed_ledger_partitions_restore: partitions of % hold part of [%, %): restore a range no partition holds, or one a partition holds whole',
                v_table, p_from, p_to USING ERRCODE = 'invalid_parameter_value';
        END IF;
        EXECUTE format('CREATE TABLE public.%I PARTITION OF public.%I FOR VALUES FROM (%s) TO (%s)',
                       v_table || '_' || v_name, v_table, p_from, p_to);
        PERFORM owed_ledger_partition_name_indexes(v_table || '_' || v_name, v_name);
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', v_table || '_' || v_name);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', v_table || '_' || v_name);
        v_made := v_made + 1;
    END LOOP;
    IF NOT v_member THEN
        REVOKE owed_definer FROM CURRENT_USER;
    END IF;
    RETURN v_made;
END
$$;
REVOKE EXECUTE ON FUNCTION owed_ledger_partitions_restore(bigint, bigint) FROM PUBLIC;

-- owed_ledger_retention_stage readies ledger partition p_partition's
-- month for retention: it names the month's three partitions (the
-- ledger's, its attempts' and its receipts', on the same range)
-- owed_notifications_retiring, owed_notification_attempts_retiring and
-- owed_receipts_retiring, which the fixed statements of internal/archive
-- name, lifts their forced row-level security (a partition has no policy
-- for the owner: owed_ledger_partitions_ensure), so the owner reads them
-- once they are detached, and unlinks the undeliverable marks from the
-- month's rows, as the marks' foreign key's ON DELETE SET NULL would (the
-- detach refuses a month a mark points into). A partition's own row-level
-- security does not apply to reads through its parent. It answers the
-- range (from_id NULL: the legacy partitions' open start) and the three
-- names, which owed_ledger_retention_undo gives back if the month stays.
-- One month is retired at a time: *_retiring names left by a run that
-- stopped midway are refused, naming what to do.
CREATE FUNCTION owed_ledger_retention_stage(p_partition text)
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
REVOKE EXECUTE ON FUNCTION owed_ledger_retention_stage(text) FROM PUBLIC;

-- owed_ledger_retention_finish drops the staged month once its three
-- partitions are detached and its archive, read from the detached tables
-- (which no service reaches any more), is written and checked, and writes
-- the drop on the operators' trail (owed_operator_audit, action
-- retention_drop, naming the partition, the range and the archive), and
-- answers NULL. Nothing is counted: what is dropped is what the archive
-- read. A compliance hold placed on one of the month's tenants (p_tenants)
-- since retention decided keeps the month: it is attached back
-- (owed_ledger_retention_undo) and the answer says why.
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
REVOKE EXECUTE ON FUNCTION owed_ledger_retention_finish(bigint, bigint, text[], text[], bigint, text, text, timestamptz,
                                                        text) FROM PUBLIC;

-- owed_ledger_retention_undo gives the staged month back to the ledger
-- when it stays (its archive failed, a row in it was reopened, a hold came):
-- each of its three tables still detached is attached back on [p_from,
-- p_to) (p_from NULL: the legacy partitions' open start), and each takes
-- back its name (p_names, in the order owed_ledger_retention_stage answered
-- them) and its forced row-level security.
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
REVOKE EXECUTE ON FUNCTION owed_ledger_retention_undo(bigint, bigint, text[]) FROM PUBLIC;
