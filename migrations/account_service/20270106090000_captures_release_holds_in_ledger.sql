-- A capture spends its hold in the same write that takes its money: an applied debit
-- that names a hold lowers its account's `held` by its amount, moved by the ledger's
-- trigger with the balance, so a capturing account is written once per statement, not
-- once by the debit statement (its `held`) and again by the trigger (its balance).
-- Only a row's insert spends a hold: the hold is CAPTURED by then, for good, whatever
-- later becomes of the row. `accounts_available_nonnegative` (held between 0 and the
-- balance) stands behind the move.

CREATE FUNCTION ledger_capture_release(kind TEXT, status TEXT, hold_key TEXT, amount BIGINT)
RETURNS BIGINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN kind = 'DEBIT' AND status = 'APPLIED' AND hold_key IS NOT NULL
                THEN amount ELSE 0 END
$$;

CREATE OR REPLACE FUNCTION ledger_moves_balances() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    account_ids BIGINT[];
    account_deltas BIGINT[];
    account_releases BIGINT[];
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
               array_agg(ledger_capture_release(kind, status, hold_key, amount)),
               array_agg(merchant_shard), array_agg(ledger_shard_effect(kind, status, amount)),
               COUNT(DISTINCT merchant_shard)
        INTO account_ids, account_deltas, account_releases, shard_ids, shard_deltas, shards
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
        SELECT id, SUM(delta)::BIGINT AS total, COALESCE(SUM(released), 0)::BIGINT AS released
        FROM unnest(account_ids, account_deltas, account_releases) AS m (id, delta, released)
        GROUP BY id
        HAVING SUM(delta) <> 0 OR SUM(released) <> 0
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
        SET balance = x.balance + a.total, ledger_total = x.ledger_total + a.total,
            held = x.held - a.released
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
