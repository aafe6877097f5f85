-- Accounts, the merchant's balance spread over shard rows, and the ledger.

CREATE TABLE accounts (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    member_id TEXT NOT NULL,
    kind TEXT NOT NULL CONSTRAINT accounts_kind_known CHECK (kind IN ('MEMBER', 'MERCHANT')),
    -- The merchant's money lives in merchant_shards; its own row stays at zero.
    balance BIGINT NOT NULL CONSTRAINT accounts_balance_nonnegative CHECK (balance >= 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT accounts_merchant_row_holds_nothing CHECK (kind = 'MEMBER' OR balance = 0)
);

CREATE UNIQUE INDEX accounts_one_merchant ON accounts (kind) WHERE kind = 'MERCHANT';
CREATE INDEX accounts_member_id ON accounts (member_id);

INSERT INTO accounts (member_id, kind, balance) VALUES ('paysaga:merchant', 'MERCHANT', 0);

-- Every payment credits the merchant. One merchant balance row would be a lock every
-- payment queues on; sixteen rows, picked by operation key, let them run side by side.
CREATE TABLE merchant_shards (
    shard SMALLINT PRIMARY KEY CONSTRAINT merchant_shards_shard_range CHECK (shard BETWEEN 0 AND 15),
    balance BIGINT NOT NULL CONSTRAINT merchant_shards_balance_nonnegative CHECK (balance >= 0)
);

INSERT INTO merchant_shards (shard, balance) SELECT g, 0 FROM generate_series(0, 15) AS g;

-- One row per movement of money. A DEBIT moves `amount` from account_id to the
-- merchant shard; a CREDIT moves it back from the shard that received the debit it
-- refunds; an OPENING is a deposit from outside, the only kind without a key.
CREATE TABLE transactions (
    id UUID PRIMARY KEY,
    operation_key TEXT,
    kind TEXT NOT NULL CONSTRAINT transactions_kind_known CHECK (kind IN ('OPENING', 'DEBIT', 'CREDIT')),
    status TEXT NOT NULL CONSTRAINT transactions_status_known CHECK (status IN ('APPLIED', 'DECLINED')),
    account_id BIGINT NOT NULL CONSTRAINT transactions_account_fk REFERENCES accounts (id),
    amount BIGINT NOT NULL CONSTRAINT transactions_amount_positive CHECK (amount > 0),
    merchant_shard SMALLINT CONSTRAINT transactions_merchant_shard_fk REFERENCES merchant_shards (shard),
    refund_of TEXT,
    -- On a debit: how much of it has been refunded so far.
    refunded BIGINT NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT transactions_key_unless_opening CHECK ((kind = 'OPENING') = (operation_key IS NULL)),
    CONSTRAINT transactions_refund_of_on_credits CHECK ((kind = 'CREDIT') = (refund_of IS NOT NULL)),
    CONSTRAINT transactions_refund_within_debit CHECK (refunded >= 0 AND refunded <= amount),
    CONSTRAINT transactions_applied_moves_merchant CHECK (
        kind = 'OPENING' OR (status = 'APPLIED') = (merchant_shard IS NOT NULL)
    )
);

CREATE UNIQUE INDEX transactions_operation_key_unique ON transactions (operation_key) WHERE operation_key IS NOT NULL;
CREATE INDEX transactions_account_recent ON transactions (account_id, created_at DESC);

-- Every account's balance as callers see it; the invariant "the sum of all balances
-- never changes under debits and credits" is SELECT SUM(balance) FROM balances.
CREATE VIEW balances AS
SELECT a.id AS account_id,
       a.kind,
       CASE WHEN a.kind = 'MERCHANT'
            THEN (SELECT COALESCE(SUM(s.balance), 0) FROM merchant_shards s)::BIGINT
            ELSE a.balance
       END AS balance
FROM accounts a;
