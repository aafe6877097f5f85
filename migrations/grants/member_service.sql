-- What member_app, the running member service, may do in its schema. Applied by
-- member_migrator after every migration run, in one transaction, so it always matches
-- the tables that exist; a table a migration adds is covered by the first line.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA member_service TO member_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA member_service TO member_app;
REVOKE ALL ON member_service._sqlx_migrations FROM member_app;
GRANT SELECT ON member_service._sqlx_migrations TO member_app;
