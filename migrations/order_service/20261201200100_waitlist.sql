-- The FIFO waitlist: a buyer told SOLD_OUT while units are still held waits in line;
-- a unit that comes back is offered to the head of the line, held for that member
-- until a deadline, and only goes back on sale when nobody is waiting. The handoff
-- happens in PostgreSQL, in the transaction that returns the unit, whatever path
-- returns it (sweep, expiry on touch, cancel, refund, either batch path, an offer
-- expiring or released, units added).

-- OFFERED: held for one member's live offer. Not AVAILABLE, so neither a claim nor the
-- gate's quota (both read AVAILABLE units only) ever sees it.
ALTER TABLE product_stock DROP CONSTRAINT product_stock_state_valid;
ALTER TABLE product_stock ADD CONSTRAINT product_stock_state_valid
    CHECK (state IN ('AVAILABLE', 'RESERVED', 'SOLD', 'OFFERED'));

-- One member waiting for one product. WAITING and OFFERED are live; the rest are final:
-- TAKEN (the offer became a reservation), EXPIRED (the offer was not taken in time),
-- SKIPPED (at the purchase cap when a unit came their way), LEFT.
-- purchase_cap and offer_ttl_secs are the joining service's settings, kept with the
-- entry because the handoff runs in the database, wherever the unit comes back.
CREATE TABLE waitlist_entries (
    id              UUID        CONSTRAINT waitlist_entries_pkey PRIMARY KEY,
    seq             BIGINT      GENERATED ALWAYS AS IDENTITY CONSTRAINT waitlist_entries_seq_unique UNIQUE,
    product_id      BIGINT      NOT NULL CONSTRAINT waitlist_entries_product_fk REFERENCES products (id),
    member_id       TEXT        NOT NULL,
    state           TEXT        NOT NULL DEFAULT 'WAITING',
    purchase_cap    BIGINT      NOT NULL,
    offer_ttl_secs  INTEGER     NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT waitlist_entries_state_valid
        CHECK (state IN ('WAITING', 'OFFERED', 'TAKEN', 'EXPIRED', 'SKIPPED', 'LEFT')),
    CONSTRAINT waitlist_entries_cap_positive CHECK (purchase_cap > 0),
    CONSTRAINT waitlist_entries_offer_ttl_positive CHECK (offer_ttl_secs > 0)
);

-- One live entry per member and product.
CREATE UNIQUE INDEX waitlist_entries_one_live_per_member ON waitlist_entries (product_id, member_id)
    WHERE state IN ('WAITING', 'OFFERED');
-- The line itself: the head is the lowest seq (joins of a product are serialised, so
-- seq is join order).
CREATE INDEX waitlist_entries_waiting_idx ON waitlist_entries (product_id, seq) WHERE state = 'WAITING';
-- A member's entries of a product, newest first (GET .../waitlist/me).
CREATE INDEX waitlist_entries_member_idx ON waitlist_entries (product_id, member_id, seq);

-- A unit held for one entry's member until expires_at: OFFERED (live), then TAKEN,
-- EXPIRED or RELEASED (the member left). An entry is offered at most once.
CREATE TABLE waitlist_offers (
    id          UUID        CONSTRAINT waitlist_offers_pkey PRIMARY KEY,
    entry_id    UUID        NOT NULL CONSTRAINT waitlist_offers_entry_fk REFERENCES waitlist_entries (id),
    product_id  BIGINT      NOT NULL CONSTRAINT waitlist_offers_product_fk REFERENCES products (id),
    member_id   TEXT        NOT NULL,
    unit_id     BIGINT      NOT NULL CONSTRAINT waitlist_offers_unit_fk REFERENCES product_stock (id),
    state       TEXT        NOT NULL DEFAULT 'OFFERED',
    expires_at  TIMESTAMPTZ NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT waitlist_offers_entry_unique UNIQUE (entry_id),
    CONSTRAINT waitlist_offers_state_valid CHECK (state IN ('OFFERED', 'TAKEN', 'EXPIRED', 'RELEASED'))
);

-- A unit is on at most one live offer, and a member holds at most one live offer of a product.
CREATE UNIQUE INDEX waitlist_offers_live_unit_unique ON waitlist_offers (unit_id) WHERE state = 'OFFERED';
CREATE UNIQUE INDEX waitlist_offers_live_member_unique ON waitlist_offers (product_id, member_id)
    WHERE state = 'OFFERED';
-- The offer sweep walks live offers, oldest deadline first.
CREATE INDEX waitlist_offers_expiry_idx ON waitlist_offers (expires_at) WHERE state = 'OFFERED';

-- A reservation is made either with a gate pass or by taking an offer, never both.
-- The offer link is a partial unique index (rows made with a pass are not in it), so
-- a claim's insert and a confirm's update pay nothing for it; no foreign key either,
-- for the same reason (the take transaction is its one writer, and the invariant
-- checks read the link).
ALTER TABLE reservations ALTER COLUMN pass_id DROP NOT NULL;
ALTER TABLE reservations ADD COLUMN offer_id UUID;
ALTER TABLE reservations ADD CONSTRAINT reservations_pass_or_offer
    CHECK ((pass_id IS NULL) <> (offer_id IS NULL));
CREATE UNIQUE INDEX reservations_offer_id_unique ON reservations (offer_id) WHERE offer_id IS NOT NULL;

-- Joins of a product take this lock exclusively, the handoff shares it: a join that
-- finds no AVAILABLE unit cannot commit between a return finding nobody waiting and
-- that unit going back on sale, so a unit is never AVAILABLE while someone waits.
-- (The two-integer form of advisory locks, apart from single-bigint ones.)
CREATE FUNCTION waitlist_lock(p_product BIGINT, p_exclusive BOOLEAN) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF p_exclusive THEN
        PERFORM pg_advisory_xact_lock(2003, (p_product % 2147483647)::INTEGER);
    ELSE
        PERFORM pg_advisory_xact_lock_shared(2003, (p_product % 2147483647)::INTEGER);
    END IF;
END
$$;

-- Offers unit p_unit to the head of product p_product's line: the first WAITING entry
-- not locked by someone else (FOR UPDATE SKIP LOCKED: a member leaving right now is
-- passed over). A member at their purchase cap is SKIPPED and the next one asked.
-- True when an offer was made (the caller marks the unit OFFERED), false when nobody
-- waits (the unit stays AVAILABLE).
CREATE FUNCTION waitlist_offer_unit(p_product BIGINT, p_unit BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    e   RECORD;
    held BIGINT;
BEGIN
    PERFORM waitlist_lock(p_product, FALSE);
    LOOP
        SELECT w.id, w.member_id, w.purchase_cap, w.offer_ttl_secs INTO e
        FROM waitlist_entries w
        WHERE w.product_id = p_product AND w.state = 'WAITING'
        ORDER BY w.seq
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN FALSE;
        END IF;
        SELECT COUNT(*) INTO held
        FROM reservations r
        WHERE r.product_id = p_product AND r.member_id = e.member_id
          AND r.state IN ('RESERVED', 'CONFIRMED');
        IF held >= e.purchase_cap THEN
            UPDATE waitlist_entries SET state = 'SKIPPED', updated_at = now() WHERE id = e.id;
            CONTINUE;
        END IF;
        INSERT INTO waitlist_offers (id, entry_id, product_id, member_id, unit_id, expires_at)
        VALUES (uuid_v7(), e.id, p_product, e.member_id, p_unit,
                now() + make_interval(secs => e.offer_ttl_secs));
        UPDATE waitlist_entries SET state = 'OFFERED', updated_at = now() WHERE id = e.id;
        RETURN TRUE;
    END LOOP;
END
$$;

-- Every update that puts a unit back on sale passes through here first: with someone
-- waiting, the unit becomes OFFERED instead, in the same row version (so it is never
-- AVAILABLE, not even inside the returning transaction) and the same statement (so the
-- counts a statement checks, units moved against reservations moved, are unchanged).
-- Confirms and claims (RESERVED -> SOLD, AVAILABLE -> RESERVED) fail the WHEN clause
-- and call nothing.
CREATE FUNCTION product_stock_returned() RETURNS TRIGGER
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF waitlist_offer_unit(NEW.product_id, NEW.id) THEN
        NEW.state := 'OFFERED';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER product_stock_handoff
    BEFORE UPDATE OF state ON product_stock
    FOR EACH ROW
    WHEN (NEW.state = 'AVAILABLE' AND OLD.state <> 'AVAILABLE')
    EXECUTE FUNCTION product_stock_returned();

-- AVAILABLE units of products with someone waiting, offered in line order; returns
-- the offers made. Run after units are added (a statement trigger: one call per
-- insert, however many units) and by the offer sweep, which so also repairs the one
-- case the row trigger leaves: a waiter passed over while locked by a transaction
-- that then rolled back.
CREATE FUNCTION waitlist_catch_up() RETURNS INTEGER
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    p    RECORD;
    u    RECORD;
    made INTEGER := 0;
BEGIN
    FOR p IN
        SELECT w.product_id, COUNT(*) AS waiting
        FROM waitlist_entries w
        WHERE w.state = 'WAITING'
        GROUP BY w.product_id
        ORDER BY w.product_id
    LOOP
        FOR u IN
            SELECT s.id
            FROM product_stock s
            WHERE s.product_id = p.product_id AND s.state = 'AVAILABLE'
            ORDER BY s.id
            LIMIT p.waiting
            FOR UPDATE SKIP LOCKED
        LOOP
            EXIT WHEN NOT waitlist_offer_unit(p.product_id, u.id);
            UPDATE product_stock SET state = 'OFFERED', updated_at = now() WHERE id = u.id;
            made := made + 1;
        END LOOP;
    END LOOP;
    RETURN made;
END
$$;

CREATE FUNCTION product_stock_added() RETURNS TRIGGER
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM waitlist_catch_up();
    RETURN NULL;
END
$$;

CREATE TRIGGER product_stock_added_handoff
    AFTER INSERT ON product_stock
    FOR EACH STATEMENT
    EXECUTE FUNCTION product_stock_added();

-- waitlist.offer_made and waitlist.offer_expired, in the transaction of the change.
CREATE FUNCTION outbox_offer_event() RETURNS TRIGGER
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO outbox_events (id, type, subject, data)
        VALUES (uuid_v7(), 'waitlist.offer_made', NEW.id::TEXT,
                jsonb_build_object(
                    'offer_id', NEW.id::TEXT,
                    'product_id', NEW.product_id::TEXT,
                    'member_id', NEW.member_id,
                    'unit_id', NEW.unit_id::TEXT,
                    'expires_at', rfc3339(NEW.expires_at)));
    ELSE
        INSERT INTO outbox_events (id, type, subject, data)
        VALUES (uuid_v7(), 'waitlist.offer_expired', NEW.id::TEXT,
                jsonb_build_object(
                    'offer_id', NEW.id::TEXT,
                    'product_id', NEW.product_id::TEXT,
                    'member_id', NEW.member_id,
                    'unit_id', NEW.unit_id::TEXT));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER waitlist_offers_made_event
    AFTER INSERT ON waitlist_offers
    FOR EACH ROW
    EXECUTE FUNCTION outbox_offer_event();

CREATE TRIGGER waitlist_offers_expired_event
    AFTER UPDATE OF state ON waitlist_offers
    FOR EACH ROW
    WHEN (NEW.state = 'EXPIRED' AND OLD.state <> 'EXPIRED')
    EXECUTE FUNCTION outbox_offer_event();
