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

-- The statements over the transition tables only gather each row's effects (a scan, the
-- same plan at any size); the moves are planned over arrays, where an index lookup per
-- account is the right plan for a batch of one and of thousands.
CREATE FUNCTION ledger_moves_balances() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    account_ids BIGINT[];
    account_deltas BIGINT[];
    shard_ids SMALLINT[];
    shard_deltas BIGINT[];
    expected BIGINT;
    done BIGINT;
BEGIN
    -- An update's rows move by what the new row does less what the old one did (a
    -- debit declined after the fact gives its money back).
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(account_id), array_agg(ledger_account_effect(kind, status, amount)),
               array_agg(merchant_shard), array_agg(ledger_shard_effect(kind, status, amount))
        INTO account_ids, account_deltas, shard_ids, shard_deltas
        FROM ledger_after;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(account_id), array_agg(-ledger_account_effect(kind, status, amount)),
               array_agg(merchant_shard), array_agg(-ledger_shard_effect(kind, status, amount))
        INTO account_ids, account_deltas, shard_ids, shard_deltas
        FROM ledger_before;
    ELSE
        SELECT array_agg(account_id), array_agg(account_delta),
               array_agg(merchant_shard), array_agg(shard_delta)
        INTO account_ids, account_deltas, shard_ids, shard_deltas
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

    -- The statement that wrote the rows holds these accounts' locks already; the shards
    -- come last in the account service's lock order, and are taken here by number, so
    -- two statements paying out of the same shards wait for each other, never in a cycle.
    PERFORM 1 FROM merchant_shards
    WHERE shard = ANY (shard_ids)
    ORDER BY shard
    FOR NO KEY UPDATE;

    -- Every account and shard with a move must be moved, or the statement fails whole:
    -- a row the update silently passed over would leave a balance its rows do not
    -- explain, and balance and total would still agree.
    WITH d AS MATERIALIZED (
        SELECT id, SUM(delta)::BIGINT AS total
        FROM unnest(account_ids, account_deltas) AS m (id, delta)
        GROUP BY id
        HAVING SUM(delta) <> 0
    ),
    moved AS (
        UPDATE accounts a
        SET balance = a.balance + d.total, ledger_total = a.ledger_total + d.total
        FROM d
        WHERE a.id = d.id
        RETURNING a.id
    )
    SELECT (SELECT COUNT(*) FROM d), (SELECT COUNT(*) FROM moved) INTO expected, done;
    IF done <> expected THEN
        RAISE EXCEPTION 'ledger rows moving % accounts moved %', expected, done
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'ledger_moves_balances';
    END IF;

    WITH d AS MATERIALIZED (
        SELECT shard, SUM(delta)::BIGINT AS total
        FROM unnest(shard_ids, shard_deltas) AS m (shard, delta)
        WHERE shard IS NOT NULL
        GROUP BY shard
        HAVING SUM(delta) <> 0
    ),
    moved AS (
        UPDATE merchant_shards s
        SET balance = s.balance + d.total, ledger_total = s.ledger_total + d.total
        FROM d
        WHERE s.shard = d.shard
        RETURNING s.shard
    )
    SELECT (SELECT COUNT(*) FROM d), (SELECT COUNT(*) FROM moved) INTO expected, done;
    IF done <> expected THEN
        RAISE EXCEPTION 'ledger rows moving % merchant shards moved %', expected, done
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
