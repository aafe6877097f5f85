-- Per-database: one schema per service, owned by that service's role, and nothing
-- granted across. A role can reach only its own schema.
CREATE SCHEMA IF NOT EXISTS account_service AUTHORIZATION account_app;
CREATE SCHEMA IF NOT EXISTS order_service AUTHORIZATION order_app;
CREATE SCHEMA IF NOT EXISTS payment_service AUTHORIZATION payment_app;
CREATE SCHEMA IF NOT EXISTS member_service AUTHORIZATION member_app;
REVOKE ALL ON SCHEMA public FROM PUBLIC;
DO $$
BEGIN
    EXECUTE format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_database());
    EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO account_app, order_app, payment_app, member_app', current_database());
END
$$;
