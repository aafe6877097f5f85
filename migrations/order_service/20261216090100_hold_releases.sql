-- A reservation holds its price on the buyer's account (a hold in the account service
-- under the key res:{reservation_id}:hold). Cancelling it must give the money back, as
-- surely as the unit: the release is owed in the transaction that returns the unit, as
-- a row here (a transactional outbox), which the order service then sends to the
-- account service by the hold's key until the account service has answered. An
-- expired reservation owes nothing: its hold carries the same deadline and lapses at
-- the same instant.
CREATE TABLE hold_releases (
    reservation_id UUID        CONSTRAINT hold_releases_pkey PRIMARY KEY
                               CONSTRAINT hold_releases_reservation_fk REFERENCES reservations (id),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- When the account service answered the release (released, or nothing to release).
    released_at    TIMESTAMPTZ
);

-- What the drain reads: releases still owed, oldest first.
CREATE INDEX hold_releases_owed_idx ON hold_releases (created_at) WHERE released_at IS NULL;

-- Every path that cancels a live reservation (a buyer's cancel, a failed payment's
-- release, either batch path) owes its hold's release, in its own transaction.
CREATE FUNCTION reservation_hold_release() RETURNS TRIGGER
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO hold_releases (reservation_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER reservations_hold_release
    AFTER UPDATE OF state ON reservations
    FOR EACH ROW
    WHEN (OLD.state = 'RESERVED' AND NEW.state = 'CANCELLED')
    EXECUTE FUNCTION reservation_hold_release();
