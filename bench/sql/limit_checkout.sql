-- The database's own limit for a checkout: the same work as paysaga's, written as SQL in
-- one function and nothing else in the way (no HTTP, no tokens, no saga, no events).
-- One call checks out a batch of buyers: each gets a unit claimed with SKIP LOCKED, a
-- ledger row under its operation key, its account debited, the unit marked sold and the
-- checkout recorded. A batch that cannot be served whole (funds, stock, a key seen
-- before) fails whole, so no money is taken without a unit.

CREATE SCHEMA bench_limit;

CREATE TABLE bench_limit.units (
    id BIGINT PRIMARY KEY,
    product_id BIGINT NOT NULL,
    state TEXT NOT NULL DEFAULT 'AVAILABLE'
        CONSTRAINT units_state_known CHECK (state IN ('AVAILABLE', 'SOLD'))
);
CREATE INDEX units_available ON bench_limit.units (product_id, id) WHERE state = 'AVAILABLE';

CREATE TABLE bench_limit.accounts (
    id BIGINT PRIMARY KEY,
    balance BIGINT NOT NULL CONSTRAINT accounts_balance_nonnegative CHECK (balance >= 0)
);

CREATE TABLE bench_limit.ledger (
    operation_key TEXT PRIMARY KEY,
    account_id BIGINT NOT NULL CONSTRAINT ledger_account_fk REFERENCES bench_limit.accounts (id),
    amount BIGINT NOT NULL CONSTRAINT ledger_amount_positive CHECK (amount > 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE bench_limit.checkouts (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    unit_id BIGINT NOT NULL CONSTRAINT checkouts_unit_once UNIQUE
        CONSTRAINT checkouts_unit_fk REFERENCES bench_limit.units (id),
    account_id BIGINT NOT NULL,
    operation_key TEXT NOT NULL CONSTRAINT checkouts_key_once UNIQUE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE FUNCTION bench_limit.checkout(buyers BIGINT[], keys TEXT[], product BIGINT, price BIGINT)
RETURNS INTEGER
LANGUAGE plpgsql SET search_path = bench_limit AS $$
DECLARE
    done INTEGER;
BEGIN
    WITH wanted AS (
        SELECT b.account_id, b.operation_key
        FROM unnest(buyers, keys) AS b(account_id, operation_key)
    ),
    ledgered AS (
        INSERT INTO ledger (operation_key, account_id, amount)
        SELECT operation_key, account_id, price FROM wanted
        ON CONFLICT (operation_key) DO NOTHING
        RETURNING operation_key, account_id
    ),
    debited AS (
        UPDATE accounts a SET balance = a.balance - price
        FROM ledgered l
        WHERE a.id = l.account_id
        RETURNING l.operation_key, a.id AS account_id
    ),
    numbered AS (
        SELECT operation_key, account_id, row_number() OVER (ORDER BY account_id) AS n
        FROM debited
    ),
    free AS (
        SELECT id FROM units
        WHERE product_id = product AND state = 'AVAILABLE'
        ORDER BY id
        LIMIT cardinality(buyers)
        FOR UPDATE SKIP LOCKED
    ),
    claimed AS (
        SELECT id, row_number() OVER (ORDER BY id) AS n FROM free
    ),
    sold AS (
        UPDATE units u SET state = 'SOLD'
        FROM claimed c JOIN numbered d ON d.n = c.n
        WHERE u.id = c.id
        RETURNING u.id, d.account_id, d.operation_key
    )
    INSERT INTO checkouts (unit_id, account_id, operation_key)
    SELECT id, account_id, operation_key FROM sold;
    GET DIAGNOSTICS done = ROW_COUNT;
    IF done <> cardinality(buyers) THEN
        RAISE EXCEPTION 'batch of % served only % checkouts', cardinality(buyers), done
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN done;
END
$$;
