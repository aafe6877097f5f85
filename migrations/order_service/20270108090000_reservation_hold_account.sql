-- The account a reservation's price is held on, as its hold named it: the payment for
-- the reservation must be made from that account (its debit captures that hold), so
-- whoever pays learns it with the reservation and need not ask the account service.
-- NULL for reservations made before holds, and for claims made without one (the
-- benchmark's claim strategies).
ALTER TABLE reservations ADD COLUMN account_id BIGINT NULL;
