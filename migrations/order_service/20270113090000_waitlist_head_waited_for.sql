-- A returned unit goes to the head of the line even while another transaction has the
-- head's entry locked: the handoff waits for that lock instead of passing the entry
-- over. Passed over (SKIP LOCKED), a member was skipped whenever a transaction that
-- locked their entry then rolled back (a crashed order service: a handoff to them,
-- never committed) while the unit went to someone behind them; and the member leaving
-- right now is met after the leave commits, found LEFT and passed over then. Every
-- locker of a WAITING entry takes entries head first under the product's shared
-- waitlist lock, or (a leave) locks its own entry and nothing after it, so waiting
-- forms no cycle.
--
-- The offer is stamped when it is decided (clock_timestamp(), under the entry's lock),
-- not when its transaction began: the fairness checks compare it with the times
-- members joined (stamped under the join's exclusive lock) and left, and a long
-- transaction's start says nothing about who was in line when it handed a unit on.
CREATE OR REPLACE FUNCTION waitlist_offer_unit(p_product BIGINT, p_unit BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    e    RECORD;
    held BIGINT;
BEGIN
    PERFORM waitlist_lock(p_product, FALSE);
    LOOP
        SELECT w.id, w.member_id, w.purchase_cap, w.offer_ttl_secs INTO e
        FROM waitlist_entries w
        WHERE w.product_id = p_product AND w.state = 'WAITING'
        ORDER BY w.seq
        LIMIT 1
        FOR UPDATE;
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
        INSERT INTO waitlist_offers (id, entry_id, product_id, member_id, unit_id, expires_at,
                                     created_at)
        VALUES (uuid_v7(), e.id, p_product, e.member_id, p_unit,
                now() + make_interval(secs => e.offer_ttl_secs), clock_timestamp());
        UPDATE waitlist_entries SET state = 'OFFERED', updated_at = now() WHERE id = e.id;
        RETURN TRUE;
    END LOOP;
END
$$;
