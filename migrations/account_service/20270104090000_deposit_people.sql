-- A deposit is carried out only with the orchestrator's signed authorization, which
-- names the staff person who asked for it and, above the approval limit, the second
-- person who approved it. The ledger row keeps both, so the ledger itself tells an
-- approved deposit from any other. Rows of other kinds name nobody.
ALTER TABLE transactions
    ADD COLUMN requested_by TEXT,
    ADD COLUMN approved_by TEXT,
    ADD CONSTRAINT transactions_people_on_deposits_only CHECK (
        kind = 'DEPOSIT' OR (requested_by IS NULL AND approved_by IS NULL)),
    ADD CONSTRAINT transactions_approved_after_requested CHECK (
        approved_by IS NULL OR requested_by IS NOT NULL);

-- Every deposit from now on names who asked for it. Deposits written before
-- authorizations existed name nobody, so the rule holds for new rows only.
ALTER TABLE transactions
    ADD CONSTRAINT transactions_deposit_requested_by CHECK (
        kind <> 'DEPOSIT' OR requested_by IS NOT NULL) NOT VALID;
