-- A member holds at most one live reservation of a product. Without it a buyer whose
-- pass expired could take another pass and hold a second unit, again and again, while
-- their first reservation still runs. (How many a member may buy in all is checked by
-- the claim itself, against the reservations that hold or sold a unit.)
CREATE UNIQUE INDEX reservations_one_live_per_member ON reservations (product_id, member_id)
    WHERE state = 'RESERVED';
