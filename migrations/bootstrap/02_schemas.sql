-- Per-database: one schema per service, owned by that service's migrator, and nothing
-- granted across. The runtime role gets USAGE and the table rights its grants file
-- lists (applied after each migration run), never CREATE: a running service cannot
-- change its own schema, and a role can reach only its own schema.
CREATE SCHEMA IF NOT EXISTS account_service AUTHORIZATION account_migrator;
CREATE SCHEMA IF NOT EXISTS order_service AUTHORIZATION order_migrator;
CREATE SCHEMA IF NOT EXISTS payment_service AUTHORIZATION payment_migrator;
CREATE SCHEMA IF NOT EXISTS member_service AUTHORIZATION member_migrator;
-- A database made when each runtime role owned its schema: hand the schema and
-- everything in it to the migrator. The grants file gives the runtime role back what
-- it uses at the next migration run.
DO $$
DECLARE
    pair TEXT[];
BEGIN
    FOREACH pair SLICE 1 IN ARRAY ARRAY[
        ARRAY['account_service', 'account_app', 'account_migrator'],
        ARRAY['order_service', 'order_app', 'order_migrator'],
        ARRAY['payment_service', 'payment_app', 'payment_migrator'],
        ARRAY['member_service', 'member_app', 'member_migrator']
    ] LOOP
        IF EXISTS (
            SELECT 1 FROM pg_namespace
            WHERE nspname = pair[1] AND nspowner = pair[2]::regrole
        ) THEN
            EXECUTE format('REASSIGN OWNED BY %I TO %I', pair[2], pair[3]);
        END IF;
    END LOOP;
END
$$;
REVOKE ALL ON SCHEMA public FROM PUBLIC;
DO $$
BEGIN
    EXECUTE format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_database());
    EXECUTE format(
        'GRANT CONNECT, TEMPORARY ON DATABASE %I TO account_app, order_app, payment_app, member_app',
        current_database()
    );
    EXECUTE format(
        'GRANT CONNECT ON DATABASE %I TO account_migrator, order_migrator, payment_migrator, member_migrator',
        current_database()
    );
END
$$;
GRANT USAGE ON SCHEMA account_service TO account_app;
GRANT USAGE ON SCHEMA order_service TO order_app;
GRANT USAGE ON SCHEMA payment_service TO payment_app;
GRANT USAGE ON SCHEMA member_service TO member_app;
