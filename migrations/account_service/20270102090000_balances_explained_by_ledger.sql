-- A balance cannot change without its ledger rows in the same transaction, and a ledger
-- row cannot be written or moved without its balance. Each account and merchant shard
-- keeps `ledger_total`, the signed sum of its applied rows, moved only by the triggers
-- below (which run as the migrator: the service's role has no right to the column); at
-- commit a deferred constraint trigger refuses any row whose balance differs from it.
-- The periodic reconciliation stays as a second, independent check.

-- The sign rules, written once: what an applied row does to its account, and to the
-- merchant shard it pays into (a debit) or is refunded from (a credit).
CREATE FUNCTION ledger_account_effect(kind TEXT, status TEXT, amount BIGINT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN status <> 'APPLIED' THEN 0
        WHEN kind IN ('DEBIT', 'TRANSFER_OUT') THEN -amount
        ELSE amount
    END
$$;

CREATE FUNCTION ledger_shard_effect(kind TEXT, status TEXT, amount BIGINT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN status <> 'APPLIED' THEN 0
        WHEN kind = 'DEBIT' THEN amount
        WHEN kind = 'CREDIT' THEN -amount
        ELSE 0
    END
$$;

CREATE OR REPLACE VIEW entries AS
SELECT t.id, t.account_id, t.kind, t.operation_key, t.transfer_id,
       ledger_account_effect(t.kind, t.status, t.amount) AS amount
FROM transactions t
WHERE t.status = 'APPLIED';

ALTER TABLE accounts ADD COLUMN ledger_total BIGINT NOT NULL DEFAULT 0;
ALTER TABLE merchant_shards ADD COLUMN ledger_total BIGINT NOT NULL DEFAULT 0;

UPDATE accounts a SET ledger_total = e.total
FROM (SELECT account_id, SUM(amount)::BIGINT AS total FROM entries GROUP BY account_id) AS e
WHERE a.id = e.account_id;

UPDATE merchant_shards s SET ledger_total = t.total
FROM (SELECT merchant_shard,
             SUM(ledger_shard_effect(kind, status, amount))::BIGINT AS total
      FROM transactions
      WHERE merchant_shard IS NOT NULL
      GROUP BY merchant_shard) AS t
WHERE s.shard = t.merchant_shard;

-- A new account starts with nothing on its ledger, whatever its insert says.
CREATE FUNCTION accounts_ledger_total_starts_at_zero() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    NEW.ledger_total := 0;
    RETURN NEW;
END
$$;

CREATE TRIGGER accounts_ledger_total_starts_at_zero
    BEFORE INSERT ON accounts
    FOR EACH ROW EXECUTE FUNCTION accounts_ledger_total_starts_at_zero();

-- Moves each account's and shard's total by what one statement's rows changed, once per
-- statement (a debit batch is one statement). The rows' accounts and shards are the
-- ones the same statement moved, so their locks are already held. An update may move
-- a row's status and shard (a declined debit): the old row's effects are taken off and
-- the new row's put on. (The service may not delete rows; an administrator's delete
-- is followed all the same.)
CREATE FUNCTION ledger_totals_follow() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    added TEXT := 'SELECT account_id, merchant_shard,
                          ledger_account_effect(kind, status, amount) AS account_delta,
                          ledger_shard_effect(kind, status, amount) AS shard_delta
                   FROM ledger_after';
    taken TEXT := 'SELECT account_id, merchant_shard,
                          -ledger_account_effect(kind, status, amount) AS account_delta,
                          -ledger_shard_effect(kind, status, amount) AS shard_delta
                   FROM ledger_before';
    moves TEXT := CASE TG_OP
        WHEN 'INSERT' THEN added
        WHEN 'DELETE' THEN taken
        ELSE added || ' UNION ALL ' || taken
    END;
BEGIN
    EXECUTE format($sql$
        WITH moves AS MATERIALIZED (%s),
        accounts_moved AS (
            UPDATE accounts a SET ledger_total = a.ledger_total + d.total
            FROM (SELECT account_id, SUM(account_delta)::BIGINT AS total
                  FROM moves GROUP BY account_id) AS d
            WHERE a.id = d.account_id AND d.total <> 0
        )
        UPDATE merchant_shards s SET ledger_total = s.ledger_total + d.total
        FROM (SELECT merchant_shard, SUM(shard_delta)::BIGINT AS total
              FROM moves WHERE merchant_shard IS NOT NULL GROUP BY merchant_shard) AS d
        WHERE s.shard = d.merchant_shard AND d.total <> 0
    $sql$, moves);
    RETURN NULL;
END
$$;

CREATE TRIGGER ledger_totals_after_insert
    AFTER INSERT ON transactions
    REFERENCING NEW TABLE AS ledger_after
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_totals_follow();

CREATE TRIGGER ledger_totals_after_update
    AFTER UPDATE ON transactions
    REFERENCING OLD TABLE AS ledger_before NEW TABLE AS ledger_after
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_totals_follow();

CREATE TRIGGER ledger_totals_after_delete
    AFTER DELETE ON transactions
    REFERENCING OLD TABLE AS ledger_before
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_totals_follow();

-- At commit: every account or shard whose balance or total moved must agree. The row
-- is read again, since several moves of one row queue several checks.
CREATE FUNCTION accounts_balance_explained() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    now_balance BIGINT;
    now_total BIGINT;
BEGIN
    SELECT balance, ledger_total INTO now_balance, now_total FROM accounts WHERE id = NEW.id;
    IF now_balance IS DISTINCT FROM now_total THEN
        RAISE EXCEPTION 'account %: balance % is not its ledger''s %', NEW.id, now_balance, now_total
            USING ERRCODE = 'integrity_constraint_violation',
                  CONSTRAINT = 'accounts_balance_explained';
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION merchant_shards_balance_explained() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    now_balance BIGINT;
    now_total BIGINT;
BEGIN
    SELECT balance, ledger_total INTO now_balance, now_total
    FROM merchant_shards WHERE shard = NEW.shard;
    IF now_balance IS DISTINCT FROM now_total THEN
        RAISE EXCEPTION 'merchant shard %: balance % is not its ledger''s %', NEW.shard, now_balance, now_total
            USING ERRCODE = 'integrity_constraint_violation',
                  CONSTRAINT = 'merchant_shards_balance_explained';
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER accounts_balance_explained
    AFTER INSERT OR UPDATE OF balance, ledger_total ON accounts
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.balance IS DISTINCT FROM NEW.ledger_total)
    EXECUTE FUNCTION accounts_balance_explained();

CREATE CONSTRAINT TRIGGER merchant_shards_balance_explained
    AFTER UPDATE OF balance, ledger_total ON merchant_shards
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.balance IS DISTINCT FROM NEW.ledger_total)
    EXECUTE FUNCTION merchant_shards_balance_explained();

-- Only the triggers move totals.
REVOKE EXECUTE ON FUNCTION ledger_totals_follow() FROM PUBLIC;
