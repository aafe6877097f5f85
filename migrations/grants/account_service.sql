-- What account_app, the running account service, may do in its schema. Applied by
-- account_migrator after every migration run, in one transaction, so it always matches
-- the tables that exist; a table a migration adds is covered by the first line.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA account_service TO account_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA account_service TO account_app;
REVOKE ALL ON account_service._sqlx_migrations FROM account_app;
GRANT SELECT ON account_service._sqlx_migrations TO account_app;

-- The ledger is append-only. A transaction row is never deleted, and of its columns
-- only those a debit's decline and a refund move can change: `status` and
-- `merchant_shard` (a debit the balance cannot cover is recorded DECLINED, off the
-- merchant) and `refunded` (how much of a debit came back). The amount, the account,
-- the kind and the operation key of a row, once written, are out of the service's
-- reach; transactions_guard (a migration) limits how the three may move.
REVOKE UPDATE, DELETE ON account_service.transactions FROM account_app;
GRANT UPDATE (status, merchant_shard, refunded) ON account_service.transactions TO account_app;

-- Accounts and shards are never deleted, and their balances move only with the ledger
-- rows (a trigger the migrator owns moves them): the service may change only what an
-- account's holds hold.
REVOKE UPDATE, DELETE ON account_service.accounts, account_service.merchant_shards FROM account_app;
GRANT UPDATE (held) ON account_service.accounts TO account_app;

-- A hold is never deleted; only its state moves (once: holds_guard), with the debit
-- that captured it and when. Its key, account, amount and deadline are fixed.
REVOKE UPDATE, DELETE ON account_service.holds FROM account_app;
GRANT UPDATE (state, captured_by, settled_at) ON account_service.holds TO account_app;
