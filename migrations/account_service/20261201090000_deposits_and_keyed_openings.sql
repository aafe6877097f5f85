-- Deposits (an operator's top-up: money paid in from outside, under an operation key)
-- and idempotent openings (the member service opens each member's account under a key,
-- so a retried sign-up can never open a second one).

ALTER TABLE transactions DROP CONSTRAINT transactions_kind_known;
ALTER TABLE transactions ADD CONSTRAINT transactions_kind_known
    CHECK (kind IN ('OPENING', 'DEPOSIT', 'DEBIT', 'CREDIT'));

-- Money from outside (openings, deposits) never touches the merchant.
ALTER TABLE transactions DROP CONSTRAINT transactions_applied_moves_merchant;
ALTER TABLE transactions ADD CONSTRAINT transactions_applied_moves_merchant CHECK (
    kind IN ('OPENING', 'DEPOSIT') OR (status = 'APPLIED') = (merchant_shard IS NOT NULL)
);
ALTER TABLE transactions ADD CONSTRAINT transactions_outside_money_applied_off_merchant CHECK (
    kind NOT IN ('OPENING', 'DEPOSIT') OR (status = 'APPLIED' AND merchant_shard IS NULL)
);

ALTER TABLE accounts ADD COLUMN open_key TEXT;
ALTER TABLE accounts ADD CONSTRAINT accounts_open_key_unique UNIQUE (open_key);
