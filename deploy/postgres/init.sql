-- Runs once, when the compose Postgres container initialises its volume.
--
-- owed_owner owns the schema: migrations and the queue emulator's owed_queue
-- schema run as it. owed_app is what the sweeper and workers connect as: it
-- gets DML only (the migrations grant it), and it is neither a superuser nor
-- BYPASSRLS, because either would make row-level security a no-op and tenant
-- isolation vacuous.
--
-- The passwords are for the local stack only; a real deployment creates these
-- roles with secrets from its own store.
CREATE ROLE owed_owner LOGIN PASSWORD 'owner-dev-password' NOSUPERUSER NOBYPASSRLS CREATEDB;
CREATE ROLE owed_app LOGIN PASSWORD 'app-dev-password' NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
CREATE DATABASE owed OWNER owed_owner;
\connect owed
-- Postgres 15 no longer lets every role create in public; the owner needs it
-- for the migrations, the application role only to use it.
ALTER SCHEMA public OWNER TO owed_owner;
GRANT USAGE ON SCHEMA public TO owed_app;
