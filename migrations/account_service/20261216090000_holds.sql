-- Holds: money of a member account set aside under an operation key (a reservation's
-- price, while the buyer pays), until a debit captures it, it is released, or its
-- deadline passes. What holds hold is kept on the account row (`held`), decided and
-- moved under that row's lock like the balance, so two holds can never count the same
-- money and a constraint, not only the code, keeps the available balance at 0 or more.

ALTER TABLE accounts ADD COLUMN held BIGINT NOT NULL DEFAULT 0;
ALTER TABLE accounts ADD CONSTRAINT accounts_available_nonnegative
    CHECK (held >= 0 AND held <= balance);
ALTER TABLE accounts ADD CONSTRAINT accounts_merchant_holds_nothing
    CHECK (kind = 'MEMBER' OR held = 0);

-- HELD is live until expires_at (the database's clock); CAPTURED (a debit took the
-- money: captured_by is its key) and RELEASED (the money is available again: released,
-- or lapsed and swept) are final, reached once (holds_guard).
CREATE TABLE holds (
    id            UUID        CONSTRAINT holds_pkey PRIMARY KEY,
    operation_key TEXT        NOT NULL CONSTRAINT holds_operation_key_unique UNIQUE,
    account_id    BIGINT      NOT NULL CONSTRAINT holds_account_fk REFERENCES accounts (id),
    amount        BIGINT      NOT NULL CONSTRAINT holds_amount_positive CHECK (amount > 0),
    state         TEXT        NOT NULL DEFAULT 'HELD'
        CONSTRAINT holds_state_known CHECK (state IN ('HELD', 'CAPTURED', 'RELEASED')),
    expires_at    TIMESTAMPTZ NOT NULL,
    captured_by   TEXT        CONSTRAINT holds_captured_by_unique UNIQUE,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    settled_at    TIMESTAMPTZ,
    CONSTRAINT holds_deadline_after_placement CHECK (expires_at > created_at),
    CONSTRAINT holds_captured_names_its_debit CHECK ((state = 'CAPTURED') = (captured_by IS NOT NULL)),
    CONSTRAINT holds_settled_once_final CHECK ((state = 'HELD') = (settled_at IS NULL))
);

-- The sweep of lapsed holds, oldest deadline first, and the listing of live holds by
-- age (the order service's reconciliation): both walk HELD holds only.
CREATE INDEX holds_held_expiry_idx ON holds (expires_at) WHERE state = 'HELD';
CREATE INDEX holds_held_created_idx ON holds (created_at, id) WHERE state = 'HELD';
-- An account's holds (the invariant checks; an account view).
CREATE INDEX holds_account_idx ON holds (account_id);

-- A hold moves once, out of HELD, and never back; what was captured stays captured.
-- Owned by the migrator, so the running service cannot drop it.
CREATE FUNCTION holds_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state <> 'HELD' AND NEW.state IS DISTINCT FROM OLD.state THEN
        RAISE EXCEPTION 'hold %: % is final, it cannot become %', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF OLD.captured_by IS NOT NULL AND NEW.captured_by IS DISTINCT FROM OLD.captured_by THEN
        RAISE EXCEPTION 'hold %: captured by %, it cannot be captured again', OLD.id, OLD.captured_by
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER holds_guard
    BEFORE UPDATE ON holds
    FOR EACH ROW EXECUTE FUNCTION holds_guard();

-- A debit may capture a hold (hold_key); a declined debit says why (declined_for), so
-- a replay of its key is refused with the same code.
ALTER TABLE transactions ADD COLUMN hold_key TEXT;
ALTER TABLE transactions ADD COLUMN declined_for TEXT;
UPDATE transactions SET declined_for = 'INSUFFICIENT_FUNDS' WHERE status = 'DECLINED';
ALTER TABLE transactions ADD CONSTRAINT transactions_hold_on_debits
    CHECK (hold_key IS NULL OR kind = 'DEBIT');
ALTER TABLE transactions ADD CONSTRAINT transactions_declined_for_known
    CHECK (declined_for IN ('INSUFFICIENT_FUNDS', 'HOLD_NOT_FOUND', 'HOLD_RELEASED',
                            'HOLD_EXPIRED', 'HOLD_MISMATCH'));
ALTER TABLE transactions ADD CONSTRAINT transactions_declined_says_why
    CHECK ((status = 'DECLINED') = (declined_for IS NOT NULL));
-- A hold is captured by one applied debit at most.
CREATE UNIQUE INDEX transactions_hold_captured_once ON transactions (hold_key)
    WHERE hold_key IS NOT NULL AND status = 'APPLIED';
