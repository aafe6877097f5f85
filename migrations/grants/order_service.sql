-- What order_app, the running order service, may do in its schema. Applied by
-- order_migrator after every migration run, in one transaction, so it always matches
-- the tables that exist; a table a migration adds is covered by the first line.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA order_service TO order_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA order_service TO order_app;
REVOKE ALL ON order_service._sqlx_migrations FROM order_app;
GRANT SELECT ON order_service._sqlx_migrations TO order_app;

-- Products, their units and reservations are never deleted: reservations and orders
-- name them without a foreign key (migration `hot_references_by_construction`), so
-- what they name must stay.
REVOKE DELETE, TRUNCATE ON order_service.products, order_service.product_stock,
    order_service.reservations FROM order_app;
