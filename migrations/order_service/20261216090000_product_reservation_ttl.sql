-- A product's own reservation hold time: how long a reservation of it holds its unit
-- and the price on the buyer's account. NULL: the order service's RESERVATION_TTL_SECS.
ALTER TABLE products ADD COLUMN reservation_ttl_secs INTEGER;
ALTER TABLE products ADD CONSTRAINT products_reservation_ttl_range
    CHECK (reservation_ttl_secs IS NULL OR reservation_ttl_secs BETWEEN 1 AND 86400);
