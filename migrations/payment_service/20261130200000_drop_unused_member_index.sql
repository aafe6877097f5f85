-- Nothing reads payments by member (buyers read their own payment by id); the index
-- only cost every payment insert a write.
DROP INDEX payments_member_idx;
