-- A reservation and an order are written only by statements that take their unit,
-- product and reservation from rows they hold: the claim inserts a reservation for the
-- unit it locked (a unit of that product), a waitlist take for the unit of the offer it
-- took, and the settle inserts an order for the reservation it locked and moves. None
-- of those parent rows can go away: the order service's role may not delete or
-- truncate products, units or reservations (grants), and no statement changes an id.
-- The foreign keys' per-row check (a query and a KEY SHARE lock on the parent for every
-- row, seven a checkout, four of them on the product's one row, shared by every
-- concurrent claim and settle) guarded nothing more; the invariant checker counts rows
-- whose parent is missing. The references into products and units from elsewhere
-- (stock, offers, counters, promises, waitlist entries) are written rarely and keep
-- their keys.
ALTER TABLE reservations
    DROP CONSTRAINT reservations_product_fk,
    DROP CONSTRAINT reservations_unit_fk;

ALTER TABLE orders
    DROP CONSTRAINT orders_reservation_fk,
    DROP CONSTRAINT orders_product_fk,
    DROP CONSTRAINT orders_unit_fk;
