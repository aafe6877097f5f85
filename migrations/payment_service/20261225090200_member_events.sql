-- The event log also takes in the member service's events, pulled from its outbox
-- like the order service's.
ALTER TABLE events
    DROP CONSTRAINT events_source_known,
    ADD CONSTRAINT events_source_known CHECK (source IN ('orchestrator', 'order', 'member'));
