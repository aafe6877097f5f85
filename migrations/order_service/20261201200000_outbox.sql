-- The transactional outbox: events written by the same transaction as the change they
-- tell of, pulled by the orchestrator (GET /v1/events, POST /v1/events/ack), which
-- delivers them as webhooks. An event is relayed once its relayed_at is set.

-- A UUIDv7 (48-bit Unix milliseconds, then random bits), made in the database so a
-- trigger can give an event its stable id. (PostgreSQL 18 has uuidv7(); this runs on 15.)
CREATE FUNCTION uuid_v7() RETURNS UUID
LANGUAGE sql VOLATILE AS $$
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

-- A timestamp as RFC 3339 in UTC, the way every event payload carries one.
CREATE FUNCTION rfc3339(ts TIMESTAMPTZ) RETURNS TEXT
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

CREATE TABLE outbox_events (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY CONSTRAINT outbox_events_pkey PRIMARY KEY,
    id          UUID        NOT NULL CONSTRAINT outbox_events_id_unique UNIQUE,
    type        TEXT        NOT NULL,
    subject     TEXT        NOT NULL,
    data        JSONB       NOT NULL,
    occurred_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    relayed_at  TIMESTAMPTZ
);

-- What GET /v1/events reads: events not yet relayed, oldest first.
CREATE INDEX outbox_events_unrelayed_idx ON outbox_events (seq) WHERE relayed_at IS NULL;

-- reservation.expired, on every path that expires a reservation (the sweep, a confirm or
-- cancel that finds it past its deadline, either batch path), in its transaction.
-- Trigger functions keep the schema's search_path (FROM CURRENT: the migration's), so
-- they work whoever's session fires them.
CREATE FUNCTION outbox_reservation_expired() RETURNS TRIGGER
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO outbox_events (id, type, subject, data)
    VALUES (uuid_v7(), 'reservation.expired', NEW.id::TEXT,
            jsonb_build_object(
                'reservation_id', NEW.id::TEXT,
                'product_id', NEW.product_id::TEXT,
                'member_id', NEW.member_id,
                'unit_id', NEW.unit_id::TEXT,
                'expired_at', rfc3339(NEW.updated_at)));
    RETURN NULL;
END
$$;

-- A row trigger with a WHEN clause: an update that does not expire a reservation (a
-- confirm, a cancel) queues nothing and calls nothing.
CREATE TRIGGER reservations_expired_event
    AFTER UPDATE OF state ON reservations
    FOR EACH ROW
    WHEN (NEW.state = 'EXPIRED' AND OLD.state <> 'EXPIRED')
    EXECUTE FUNCTION outbox_reservation_expired();
