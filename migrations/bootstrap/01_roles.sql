-- Cluster-wide roles, one per service. Run by an administrator (superuser or
-- CREATEROLE) under an advisory lock, so concurrent bootstraps do not race.
-- DEVELOPMENT ONLY passwords: production sets its own with ALTER ROLE ... PASSWORD.
DO $$
DECLARE
    r TEXT;
BEGIN
    FOREACH r IN ARRAY ARRAY['account_app', 'order_app', 'payment_app', 'member_app'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L', r, 'paysaga-dev');
        END IF;
    END LOOP;
END
$$;
