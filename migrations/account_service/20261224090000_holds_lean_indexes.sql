-- Every checkout writes a hold twice (placed with the reservation, captured by the
-- debit), and every index on holds is written each time the row is. Two indexes were
-- read by no statement of the service:
--
-- - holds_captured_by_unique: a debit names one hold (its hold_key), its capture sets
--   captured_by on that hold alone, and transactions_hold_captured_once keeps a hold to
--   one applied debit; holds_guard keeps captured_by from changing once set.
-- - holds_account_idx: an account's holds are summed only by the invariant checks,
--   which read the whole table. Accounts are never deleted nor their ids changed, so
--   the foreign key never looks holds up by account.
ALTER TABLE holds DROP CONSTRAINT holds_captured_by_unique;
DROP INDEX holds_account_idx;
