-- A payment's steps and its idempotency key's link are written only by the statement
-- that moves or creates that payment: a step row from the row the move's UPDATE
-- returned, a key's `payment_id` from the row the same statement inserted. A payment is
-- never deleted (the payment service's role may not delete or truncate payments:
-- grants) and its id never changes. The foreign keys' per-row check (a query and a
-- KEY SHARE lock on the payment, four a checkout) guarded nothing more; the invariant
-- checker counts steps and keys whose payment is missing.
ALTER TABLE payment_steps DROP CONSTRAINT payment_steps_payment_fkey;
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_payment_fkey;
