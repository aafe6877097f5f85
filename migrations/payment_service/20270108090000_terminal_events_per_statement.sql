-- A payment's terminal event is written by one INSERT per statement for every payment
-- the statement moved into a terminal state, instead of a function call and an insert
-- of its own per payment: a group-committed flush that settles many payments pays for
-- one. The events, their columns and their order within the statement (the payments'
-- order by id) are what the row trigger wrote; they still commit, or not, with the move.
-- A statement trigger cannot name columns or take a WHEN clause when it reads its
-- transition tables, so it runs for every update of payments; a statement that moves
-- nothing terminal inserts nothing.

DROP TRIGGER payments_terminal_event ON payments;
DROP FUNCTION payment_terminal_event();

CREATE FUNCTION payments_terminal_events() RETURNS TRIGGER
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO payment_service.events (id, type, subject, data, occurred_at, source)
    SELECT payment_service.uuid_v7(),
           'payment.' || lower(n.state),
           n.id::TEXT,
           jsonb_strip_nulls(jsonb_build_object(
               'payment_id', n.id::TEXT,
               'member_id', n.member_id,
               'account_id', n.account_id::TEXT,
               'reservation_id', n.reservation_id::TEXT,
               'product_id', n.product_id::TEXT,
               'amount', n.amount,
               'reason', CASE WHEN n.state = 'FAILED' THEN COALESCE(n.failure_code, 'DECLINED') END)),
           n.updated_at,
           'orchestrator'
    FROM moved_to AS n
    JOIN moved_from AS o ON o.id = n.id
    WHERE n.state IS DISTINCT FROM o.state
      AND n.state IN ('COMPLETED', 'FAILED', 'REFUNDED')
    ORDER BY n.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER payments_terminal_events
    AFTER UPDATE ON payments
    REFERENCING OLD TABLE AS moved_from NEW TABLE AS moved_to
    FOR EACH STATEMENT
    EXECUTE FUNCTION payments_terminal_events();
