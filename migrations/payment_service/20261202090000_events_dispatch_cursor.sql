-- The dispatcher keeps its place with one cursor row instead of marking each event:
-- marking rewrote every event once more (a second heap tuple and index entries per
-- finished payment). Events are fanned out in (xid, seq) order, and only those whose
-- inserting transaction is older than every transaction still running
-- (pg_snapshot_xmin): no event can later appear before the cursor, because any
-- transaction still to insert one has an xid at or above that horizon.
ALTER TABLE events ADD COLUMN xid XID8 NULL;
-- Events already fanned out sit behind the starting cursor; those still waiting take
-- this migration's transaction id, ahead of it.
UPDATE events SET xid = CASE WHEN dispatched_at IS NULL THEN pg_current_xact_id() ELSE '1'::XID8 END;
ALTER TABLE events ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
ALTER TABLE events ALTER COLUMN xid SET NOT NULL;
DROP INDEX events_undispatched_idx;
ALTER TABLE events DROP COLUMN dispatched_at;
CREATE INDEX events_dispatch_order_idx ON events (xid, seq);

CREATE TABLE event_dispatch_cursor (
    only_row BOOLEAN NOT NULL DEFAULT TRUE CONSTRAINT event_dispatch_cursor_pkey PRIMARY KEY,
    -- The last event fanned out, in dispatch order.
    xid XID8 NOT NULL,
    seq BIGINT NOT NULL,
    CONSTRAINT event_dispatch_cursor_one_row CHECK (only_row)
);
INSERT INTO event_dispatch_cursor (xid, seq) VALUES ('1'::XID8, 9223372036854775807);

-- What is still to fan out: everything after the cursor.
CREATE VIEW events_undispatched AS
    SELECT e.*
    FROM events e, event_dispatch_cursor c
    WHERE (e.xid, e.seq) > (c.xid, c.seq);
