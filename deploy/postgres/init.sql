-- Runs once, when the compose Postgres container initialises its volume.
--
-- owed_owner owns the schema: migrations run as it, and it has CREATEROLE
-- because they create owed's group roles (owed_runtime, owed_apps,
-- owed_token_admin, owed_definer: docs/security.md). owed_app is what the
-- sweeper, the workers and the API connect as: the migrations make it a
-- member of owed_runtime, and it is neither a superuser nor BYPASSRLS,
-- because either would make row-level security a no-op and tenant isolation
-- vacuous; the services refuse to start as anything that is. owed_admin is
-- what owedctl tokens connects as: the migrations make it a member of
-- owed_token_admin, the only role that may create or revoke api tokens.
-- owed_queue is the queue emulator's: it owns the owed_queue schema and
-- nothing of the ledger. owed_oncall is on-call's (the console's
-- OWED_OPERATOR_DATABASE_URL, owedctl tenants and provider pause|resume):
-- the migrations make it a member of owed_operator, the only role that may
-- hold an account, pause a tenant or write the operators' audit trail.
--
-- The passwords are for the local stack only; a real deployment creates these
-- roles with secrets from its own store.
CREATE ROLE owed_owner LOGIN PASSWORD 'owner-dev-password' NOSUPERUSER NOBYPASSRLS CREATEDB CREATEROLE;
CREATE ROLE owed_app LOGIN PASSWORD 'app-dev-password' NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
CREATE ROLE owed_admin LOGIN PASSWORD 'admin-dev-password' NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
CREATE ROLE owed_queue LOGIN PASSWORD 'queue-dev-password' NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
CREATE ROLE owed_oncall LOGIN PASSWORD 'oncall-dev-password' NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
CREATE DATABASE owed OWNER owed_owner;
-- Only the owner creates temporary objects: a login's temporary table named
-- like one of owed's is one more thing a SECURITY DEFINER function could
-- trip on (each pins pg_temp last regardless; docs/security.md).
REVOKE TEMPORARY ON DATABASE owed FROM PUBLIC;
\connect owed
-- Postgres 15 no longer lets every role create in public; the owner needs it
-- for the migrations, the application role only to use it.
ALTER SCHEMA public OWNER TO owed_owner;
GRANT USAGE ON SCHEMA public TO owed_app;
CREATE SCHEMA owed_queue AUTHORIZATION owed_queue;
