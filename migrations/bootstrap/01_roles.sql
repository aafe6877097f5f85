-- Cluster-wide roles, two per service: `<service>_migrator` owns the service's schema
-- and runs its migrations; `<service>_app` is what the running service logs in as, and
-- may only use what migrations/grants/<schema>.sql grants it. Run by an administrator
-- (superuser or CREATEROLE) under an advisory lock, so concurrent bootstraps do not race.
-- A role is created with the password in the session setting `paysaga.role_password`
-- (the DEVELOPMENT ONLY one, set only in development), else with none: it cannot log in
-- with a password until the operator gives it its own (ALTER ROLE ... PASSWORD).
DO $$
DECLARE
    r TEXT;
    pw TEXT := NULLIF(current_setting('paysaga.role_password', true), '');
BEGIN
    FOREACH r IN ARRAY ARRAY[
        'account_app', 'order_app', 'payment_app', 'member_app',
        'account_migrator', 'order_migrator', 'payment_migrator', 'member_migrator'
    ] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            IF pw IS NULL THEN
                EXECUTE format('CREATE ROLE %I LOGIN', r);
            ELSE
                EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L', r, pw);
            END IF;
        END IF;
    END LOOP;
END
$$;
