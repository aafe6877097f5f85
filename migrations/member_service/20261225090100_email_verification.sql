-- Email verification: when a member proved the address is theirs (NULL: not yet), and
-- the transactional outbox the sign-up writes its member.verification_requested event
-- to, in the transaction that creates the member. The orchestrator pulls it
-- (GET /v1/events, POST /v1/events/ack) into the event log and delivers it as a
-- webhook; an event is relayed once its relayed_at is set.
ALTER TABLE members ADD COLUMN email_verified_at TIMESTAMPTZ;

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
