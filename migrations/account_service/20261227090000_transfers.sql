-- Transfers: a member moves money from their account to another member's, under an
-- operation key. Two ledger rows, written by one statement: TRANSFER_OUT on the
-- sender's account, under the key, and TRANSFER_IN on the recipient's, without a key
-- (the key names the transfer once, on its out row). Both carry the transfer's id (the
-- out row's own id) and the other side's account, so each transfer's rows sum to zero
-- and every member balance is the sum of its rows (the `entries` view). The merchant is
-- not involved.

ALTER TABLE transactions DROP CONSTRAINT transactions_kind_known;
ALTER TABLE transactions ADD CONSTRAINT transactions_kind_known
    CHECK (kind IN ('OPENING', 'DEPOSIT', 'DEBIT', 'CREDIT', 'TRANSFER_OUT', 'TRANSFER_IN'));

ALTER TABLE transactions DROP CONSTRAINT transactions_key_unless_opening;
ALTER TABLE transactions ADD CONSTRAINT transactions_key_unless_opening_or_in
    CHECK ((kind IN ('OPENING', 'TRANSFER_IN')) = (operation_key IS NULL));

-- Money between members never touches the merchant, and is never recorded declined
-- (a transfer the balance does not cover writes nothing).
ALTER TABLE transactions DROP CONSTRAINT transactions_applied_moves_merchant;
ALTER TABLE transactions ADD CONSTRAINT transactions_applied_moves_merchant CHECK (
    kind IN ('OPENING', 'DEPOSIT', 'TRANSFER_OUT', 'TRANSFER_IN')
    OR (status = 'APPLIED') = (merchant_shard IS NOT NULL)
);
ALTER TABLE transactions DROP CONSTRAINT transactions_outside_money_applied_off_merchant;
ALTER TABLE transactions ADD CONSTRAINT transactions_off_merchant_applied CHECK (
    kind NOT IN ('OPENING', 'DEPOSIT', 'TRANSFER_OUT', 'TRANSFER_IN')
    OR (status = 'APPLIED' AND merchant_shard IS NULL)
);

ALTER TABLE transactions ADD COLUMN transfer_id UUID
    CONSTRAINT transactions_transfer_fk REFERENCES transactions (id);
ALTER TABLE transactions ADD COLUMN counter_account_id BIGINT
    CONSTRAINT transactions_counter_account_fk REFERENCES accounts (id);
ALTER TABLE transactions ADD CONSTRAINT transactions_transfer_legs CHECK (
    (kind IN ('TRANSFER_OUT', 'TRANSFER_IN'))
        = (transfer_id IS NOT NULL AND counter_account_id IS NOT NULL)
);
ALTER TABLE transactions ADD CONSTRAINT transactions_transfer_between_two
    CHECK (counter_account_id IS NULL OR counter_account_id <> account_id);
-- The out row is the transfer: its id names it.
ALTER TABLE transactions ADD CONSTRAINT transactions_transfer_named_by_out
    CHECK (kind <> 'TRANSFER_OUT' OR transfer_id = id);
-- One row of each side per transfer.
CREATE UNIQUE INDEX transactions_transfer_legs_unique
    ON transactions (transfer_id, kind) WHERE transfer_id IS NOT NULL;

-- A transfer's rows are final: their status never moves (a debit's may go to
-- DECLINED; a transfer is never recorded declined, so a DECLINED leg would be money
-- moved on one side only).
CREATE OR REPLACE FUNCTION transactions_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status
       AND (OLD.kind IN ('TRANSFER_OUT', 'TRANSFER_IN')
            OR NOT (OLD.status = 'APPLIED' AND NEW.status = 'DECLINED')) THEN
        RAISE EXCEPTION 'ledger row %: status % cannot become %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.merchant_shard IS DISTINCT FROM OLD.merchant_shard
       AND NOT (NEW.merchant_shard IS NULL AND NEW.status = 'DECLINED')
       AND OLD.kind <> 'CREDIT' THEN
        RAISE EXCEPTION 'ledger row %: merchant shard cannot be changed', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.refunded < OLD.refunded THEN
        RAISE EXCEPTION 'ledger row %: refunded cannot decrease', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

-- Every applied ledger row as a signed movement of its account: what member balances
-- are the sum of, and what each transfer's rows sum to zero in. The sign rule is
-- written here once, for every check that reads it.
CREATE VIEW entries AS
SELECT t.id, t.account_id, t.kind, t.operation_key, t.transfer_id,
       CASE WHEN t.kind IN ('DEBIT', 'TRANSFER_OUT') THEN -t.amount ELSE t.amount END AS amount
FROM transactions t
WHERE t.status = 'APPLIED';
