-- One truth for "sold out". A unit can be AVAILABLE here and still be no longer on
-- sale: the gate promised it to a pass in flight (issued, not yet used nor expired).
-- The gate reports, for each product, how many of its passes are in flight; a product
-- whose AVAILABLE units are all promised is sold out for joining the waitlist, exactly
-- when the gate's quota is spent. A unit freed from a promise (its pass expired, or its
-- holder could not pay) is handed to the head of the line at the report, before the
-- gate's quota could count it again.

CREATE TABLE gate_promises (
    product_id  BIGINT      CONSTRAINT gate_promises_pkey PRIMARY KEY
                            CONSTRAINT gate_promises_product_fk REFERENCES products (id),
    in_flight   BIGINT      NOT NULL,
    -- When the gate first reported this count (an unchanged report writes nothing).
    reported_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT gate_promises_in_flight_nonnegative CHECK (in_flight >= 0)
);

-- AVAILABLE units of p_product beyond those promised to passes in flight: units on sale
-- to a new buyer. Read under the caller's locks; the promise is the gate's last report.
CREATE FUNCTION units_free(p_product BIGINT) RETURNS BIGINT
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT GREATEST(0,
        (SELECT COUNT(*) FROM product_stock s
         WHERE s.product_id = p_product AND s.state = 'AVAILABLE')
        - COALESCE((SELECT g.in_flight FROM gate_promises g WHERE g.product_id = p_product), 0))
$$;

-- Offers p_product's free units (not promised) to its line, head first, as many as
-- wait; returns the offers made. Units promised to passes in flight are left to them.
CREATE FUNCTION waitlist_offer_free(p_product BIGINT) RETURNS INTEGER
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    waiting BIGINT;
    free    BIGINT;
    u       RECORD;
    made    INTEGER := 0;
BEGIN
    SELECT COUNT(*) INTO waiting
    FROM waitlist_entries w
    WHERE w.product_id = p_product AND w.state = 'WAITING';
    IF waiting = 0 THEN
        RETURN 0;
    END IF;
    free := units_free(p_product);
    IF free = 0 THEN
        RETURN 0;
    END IF;
    FOR u IN
        SELECT s.id
        FROM product_stock s
        WHERE s.product_id = p_product AND s.state = 'AVAILABLE'
        ORDER BY s.id
        LIMIT LEAST(waiting, free)
        FOR UPDATE SKIP LOCKED
    LOOP
        EXIT WHEN NOT waitlist_offer_unit(p_product, u.id);
        UPDATE product_stock SET state = 'OFFERED', updated_at = now() WHERE id = u.id;
        made := made + 1;
    END LOOP;
    RETURN made;
END
$$;

-- The catch-up (after units are added, and in the offer sweep) offers free units only:
-- a unit promised to a pass in flight stays that pass's until it is used or expires.
CREATE OR REPLACE FUNCTION waitlist_catch_up() RETURNS INTEGER
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    p    RECORD;
    made INTEGER := 0;
BEGIN
    FOR p IN
        SELECT DISTINCT w.product_id
        FROM waitlist_entries w
        WHERE w.state = 'WAITING'
        ORDER BY w.product_id
    LOOP
        made := made + waitlist_offer_free(p.product_id);
    END LOOP;
    RETURN made;
END
$$;

-- The gate's report of product p_product's passes in flight: recorded, then the units it
-- no longer promises handed to the line (under the handoff's shared waitlist lock, so a
-- join cannot slip between). Returns the offers made.
CREATE FUNCTION gate_report_promises(p_product BIGINT, p_in_flight BIGINT) RETURNS INTEGER
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM waitlist_lock(p_product, FALSE);
    INSERT INTO gate_promises (product_id, in_flight, reported_at)
    VALUES (p_product, p_in_flight, now())
    ON CONFLICT ON CONSTRAINT gate_promises_pkey
    DO UPDATE SET in_flight = EXCLUDED.in_flight, reported_at = EXCLUDED.reported_at
    -- An unchanged count writes nothing: most reports repeat the last one.
    WHERE gate_promises.in_flight <> EXCLUDED.in_flight;
    RETURN waitlist_offer_free(p_product);
END
$$;
