-- A member's recent keyed transactions (GET /v1/accounts/{id}, which the orchestrator
-- calls for every payment) read through an index that matches the query exactly:
-- account, newest first, keyed rows only. With only (account_id, created_at), statistics
-- taken right after a drop's accounts were funded (every row an OPENING, no key) made
-- the planner walk transactions_operation_key_unique and filter by account, a cost that
-- grows with every debit of the drop (900+ buffers a lookup in the benchmark).
CREATE INDEX transactions_account_keyed_recent
    ON transactions (account_id, created_at DESC, id DESC)
    WHERE operation_key IS NOT NULL;
DROP INDEX transactions_account_recent;
