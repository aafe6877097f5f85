-- What payment_app, the running payment service, may do in its schema. Applied by
-- payment_migrator after every migration run, in one transaction, so it always matches
-- the tables that exist; a table a migration adds is covered by the first line.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA payment_service TO payment_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA payment_service TO payment_app;
REVOKE ALL ON payment_service._sqlx_migrations FROM payment_app;
GRANT SELECT ON payment_service._sqlx_migrations TO payment_app;
-- The audit trail is append-only: the service may add rows and read them, never change
-- or remove one.
REVOKE UPDATE, DELETE, TRUNCATE ON payment_service.audit_log FROM payment_app;
-- An approval (a refund's or a top-up's) is decided, never removed: the trail of who
-- asked and who approved.
REVOKE DELETE, TRUNCATE ON payment_service.approvals FROM payment_app;
-- A payment is never deleted: its steps and its idempotency key name it without a
-- foreign key (migration `hot_references_by_construction`).
REVOKE DELETE, TRUNCATE ON payment_service.payments FROM payment_app;
