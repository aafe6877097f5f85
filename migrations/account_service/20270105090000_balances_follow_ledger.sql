-- Balances follow the ledger: the service writes ledger rows, and the trigger below,
-- running as the migrator, moves each account's and merchant shard's balance and
-- ledger_total together by what the statement's rows changed. The service's role may no
-- longer write a balance at all (its grants), so a balance cannot move without its rows,
-- and each row it moves is written once per statement (no second write of the totals,
-- no check left queued for commit). The deferred checks stay behind it, for any hand
-- that writes one column without the other.

DROP TRIGGER ledger_totals_after_insert ON transactions;
DROP TRIGGER ledger_totals_after_update ON transactions;
DROP TRIGGER ledger_totals_after_delete ON transactions;
DROP FUNCTION ledger_totals_follow();

-- The statements over the transition tables only gather each row's effects. The moves
-- reach the accounts and shards through their primary keys (`= ANY` of the ids), never
-- by a scan: the function's plans are cached per connection, and a plan made on an early
-- call (a one-row opening into a nearly empty table, where a scan is cheapest) would
-- otherwise scan every account for every later batch.
CREATE FUNCTION ledger_moves_balances() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    account_ids BIGINT[];
    account_deltas BIGINT[];
    shard_ids SMALLINT[];
    shard_deltas BIGINT[];
    shards BIGINT;
    accounts_moving BIGINT;
    accounts_moved BIGINT;
    shards_moving BIGINT;
    shards_moved BIGINT;
BEGIN
    -- An update's rows move by what the new row does less what the old one did (a
    -- debit declined after the fact gives its money back).
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(account_id), array_agg(ledger_account_effect(kind, status, amount)),
               array_agg(merchant_shard), array_agg(ledger_shard_effect(kind, status, amount)),
               COUNT(DISTINCT merchant_shard)
        INTO account_ids, account_deltas, shard_ids, shard_deltas, shards
        FROM ledger_after;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(account_id), array_agg(-ledger_account_effect(kind, status, amount)),
               array_agg(merchant_shard), array_agg(-ledger_shard_effect(kind, status, amount)),
               COUNT(DISTINCT merchant_shard)
        INTO account_ids, account_deltas, shard_ids, shard_deltas, shards
        FROM ledger_before;
    ELSE
        SELECT array_agg(account_id), array_agg(account_delta),
               array_agg(merchant_shard), array_agg(shard_delta),
               COUNT(DISTINCT merchant_shard)
        INTO account_ids, account_deltas, shard_ids, shard_deltas, shards
        FROM (SELECT account_id, merchant_shard,
                     ledger_account_effect(kind, status, amount) AS account_delta,
                     ledger_shard_effect(kind, status, amount) AS shard_delta
              FROM ledger_after
              UNION ALL
              SELECT account_id, merchant_shard,
                     -ledger_account_effect(kind, status, amount),
                     -ledger_shard_effect(kind, status, amount)
              FROM ledger_before) AS moves;
    END IF;

    -- The statement that wrote the rows holds these accounts' locks already. The shards
    -- come last in the account service's lock order: a statement paying out of several
    -- (a round of refunds) takes them here by number first, so two such statements wait
    -- for each other, never in a cycle.
    IF shards > 1 THEN
        PERFORM 1 FROM merchant_shards
        WHERE shard = ANY (shard_ids)
        ORDER BY shard
        FOR NO KEY UPDATE;
    END IF;

    -- Every account and shard with a move must be moved, or the statement fails whole:
    -- a row the update silently passed over would leave a balance its rows do not
    -- explain, and balance and total would still agree.
    WITH a AS MATERIALIZED (
        SELECT id, SUM(delta)::BIGINT AS total
        FROM unnest(account_ids, account_deltas) AS m (id, delta)
        GROUP BY id
        HAVING SUM(delta) <> 0
    ),
    s AS MATERIALIZED (
        SELECT shard, SUM(delta)::BIGINT AS total
        FROM unnest(shard_ids, shard_deltas) AS m (shard, delta)
        WHERE shard IS NOT NULL
        GROUP BY shard
        HAVING SUM(delta) <> 0
    ),
    accounts_moved AS (
        UPDATE accounts x
        SET balance = x.balance + a.total, ledger_total = x.ledger_total + a.total
        FROM a
        WHERE x.id = ANY (account_ids) AND x.id = a.id
        RETURNING x.id
    ),
    shards_moved AS (
        UPDATE merchant_shards x
        SET balance = x.balance + s.total, ledger_total = x.ledger_total + s.total
        FROM s
        WHERE x.shard = ANY (shard_ids) AND x.shard = s.shard
        RETURNING x.shard
    )
    SELECT (SELECT COUNT(*) FROM a), (SELECT COUNT(*) FROM accounts_moved),
           (SELECT COUNT(*) FROM s), (SELECT COUNT(*) FROM shards_moved)
    INTO accounts_moving, accounts_moved, shards_moving, shards_moved;
    IF accounts_moved <> accounts_moving OR shards_moved <> shards_moving THEN
        RAISE EXCEPTION 'ledger rows moving % accounts and % merchant shards moved % and %',
                        accounts_moving, shards_moving, accounts_moved, shards_moved
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'ledger_moves_balances';
    END IF;
    RETURN NULL;
END
$$;

REVOKE EXECUTE ON FUNCTION ledger_moves_balances() FROM PUBLIC;

CREATE TRIGGER ledger_moves_balances_after_insert
    AFTER INSERT ON transactions
    REFERENCING NEW TABLE AS ledger_after
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_moves_balances();

CREATE TRIGGER ledger_moves_balances_after_update
    AFTER UPDATE ON transactions
    REFERENCING OLD TABLE AS ledger_before NEW TABLE AS ledger_after
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_moves_balances();

CREATE TRIGGER ledger_moves_balances_after_delete
    AFTER DELETE ON transactions
    REFERENCING OLD TABLE AS ledger_before
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_moves_balances();
