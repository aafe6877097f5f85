-- The event log the merchant's systems learn from (transactional outbox): the
-- orchestrator's own payment events, written by a trigger in the same transaction as
-- the payment's state change, and the order service's events, pulled from its outbox.
-- `seq` orders them; `id` is what a receiver deduplicates on.
CREATE TABLE events (
    seq BIGINT GENERATED ALWAYS AS IDENTITY CONSTRAINT events_pkey PRIMARY KEY,
    id UUID NOT NULL CONSTRAINT events_id_unique UNIQUE,
    type TEXT NOT NULL,
    -- The ordering key: events about one subject are delivered in seq order.
    subject TEXT NOT NULL,
    data JSONB NOT NULL,
    occurred_at TIMESTAMPTZ NOT NULL,
    source TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Set once the event has been fanned out into deliveries (possibly none).
    dispatched_at TIMESTAMPTZ NULL,
    CONSTRAINT events_source_known CHECK (source IN ('orchestrator', 'order'))
);

-- The dispatcher's queue: only what is still to fan out, in seq order.
CREATE INDEX events_undispatched_idx ON events (seq) WHERE dispatched_at IS NULL;

-- A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds from clock_timestamp(), then
-- random bits from gen_random_uuid() with the version nibble set to 7 (bits 52 and 53
-- turn v4's 0100 into 0111; the variant bits are v4's already). PostgreSQL 15 has no
-- uuidv7() of its own.
CREATE FUNCTION uuid_v7() RETURNS UUID
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT encode(
        set_bit(
            set_bit(
                overlay(uuid_send(gen_random_uuid())
                        PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT) FROM 3)
                        FROM 1 FOR 6),
                52, 1),
            53, 1),
        'hex')::UUID
$$;

-- The product a payment is for, from its reservation when the payment was accepted;
-- the payment events name it. NULL only for payments made before it was recorded.
ALTER TABLE payments ADD COLUMN product_id BIGINT NULL;

-- One event per move into a terminal state, inserted inside the statement that moves
-- the payment, so it commits (or not) with the move, in the group-committed flush,
-- with no statement or commit of its own. The schema is named because a trigger runs
-- under whatever search_path the updating session has.
CREATE FUNCTION payment_terminal_event() RETURNS TRIGGER
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO payment_service.events (id, type, subject, data, occurred_at, source)
    VALUES (
        payment_service.uuid_v7(),
        'payment.' || lower(NEW.state),
        NEW.id::TEXT,
        jsonb_strip_nulls(jsonb_build_object(
            'payment_id', NEW.id::TEXT,
            'member_id', NEW.member_id,
            'account_id', NEW.account_id::TEXT,
            'reservation_id', NEW.reservation_id::TEXT,
            'product_id', NEW.product_id::TEXT,
            'amount', NEW.amount,
            'reason', CASE WHEN NEW.state = 'FAILED' THEN COALESCE(NEW.failure_code, 'DECLINED') END)),
        NEW.updated_at,
        'orchestrator');
    RETURN NULL;
END
$$;

-- The WHEN clause is evaluated without calling the function, so every other update
-- of a payment (steps, leases, schedules) costs nothing more.
CREATE TRIGGER payments_terminal_event
    AFTER UPDATE OF state ON payments
    FOR EACH ROW
    WHEN (NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('COMPLETED', 'FAILED', 'REFUNDED'))
    EXECUTE FUNCTION payment_terminal_event();
