-- Defence in depth: only the (state, pending action) pairs the saga can reach may be
-- stored, whatever the code does. Mirrors workflows::Position::REACHABLE. COALESCE:
-- a comparison with a NULL action is NULL, which a CHECK would let through.
ALTER TABLE payments ADD CONSTRAINT payments_position_reachable CHECK (COALESCE(
       (state = 'PROCESSING' AND pending_action = 'DEBIT')
    OR (state = 'ACCOUNT_DEBITED' AND pending_action = 'CONFIRM')
    OR (state = 'ORDER_CONFIRMED' AND pending_action = 'COMPLETE')
    OR (state = 'COMPLETED' AND pending_action IS NULL)
    OR (state = 'FAILED' AND (pending_action IS NULL OR pending_action = 'CANCEL_RESERVATION'))
    OR (state = 'REFUND_PROCESSING' AND pending_action IN ('CANCEL_ORDER', 'REFUND'))
    OR (state = 'REFUNDED' AND pending_action IS NULL),
    FALSE));

-- Payments with work left, by state: what the open-payments gauge counts, without
-- scanning the settled history.
CREATE INDEX payments_open_idx ON payments (state) WHERE pending_action IS NOT NULL;
