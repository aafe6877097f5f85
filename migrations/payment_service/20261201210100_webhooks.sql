-- Webhook endpoints (where the merchant's systems receive events) and deliveries (one
-- per event and subscribed endpoint, retried until delivered or DEAD).
CREATE TABLE webhook_endpoints (
    id UUID NOT NULL CONSTRAINT webhook_endpoints_pkey PRIMARY KEY,
    url TEXT NOT NULL,
    -- The HMAC key deliveries are signed with; shown once, when the endpoint is made.
    secret TEXT NOT NULL,
    -- Subscribed event types; empty: every type.
    event_types TEXT[] NOT NULL DEFAULT '{}',
    enabled BOOLEAN NOT NULL DEFAULT TRUE,
    description TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT webhook_endpoints_url_http CHECK (url ~ '^https?://'),
    CONSTRAINT webhook_endpoints_secret_shape CHECK (secret LIKE 'whsec\_%')
);

CREATE TABLE webhook_deliveries (
    id UUID NOT NULL CONSTRAINT webhook_deliveries_pkey PRIMARY KEY,
    event_id UUID NOT NULL,
    endpoint_id UUID NOT NULL,
    -- The event's seq and subject, copied so the ordering rule (no delivery while an
    -- earlier one of the same endpoint and subject is PENDING) is one index probe.
    event_seq BIGINT NOT NULL,
    subject TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'PENDING',
    -- Attempts started; counted when claimed, so a worker that dies mid-attempt still
    -- uses one up.
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NULL,
    lease_owner UUID NULL,
    lease_until TIMESTAMPTZ NULL,
    last_status INTEGER NULL,
    last_error TEXT NULL,
    delivered_at TIMESTAMPTZ NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT webhook_deliveries_event_endpoint_unique UNIQUE (event_id, endpoint_id),
    CONSTRAINT webhook_deliveries_event_fkey FOREIGN KEY (event_id) REFERENCES events (id),
    CONSTRAINT webhook_deliveries_endpoint_fkey FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoints (id),
    CONSTRAINT webhook_deliveries_state_known CHECK (state IN ('PENDING', 'DELIVERED', 'DEAD')),
    CONSTRAINT webhook_deliveries_pending_scheduled CHECK ((state = 'PENDING') = (next_attempt_at IS NOT NULL)),
    CONSTRAINT webhook_deliveries_delivered_when CHECK ((state = 'DELIVERED') = (delivered_at IS NOT NULL)),
    CONSTRAINT webhook_deliveries_attempts_nonnegative CHECK (attempts >= 0)
);

-- The worker's claim: due deliveries in due order.
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE state = 'PENDING';
-- The ordering rule and the lag gauge: pending deliveries by endpoint, subject and seq.
CREATE INDEX webhook_deliveries_pending_subject_idx ON webhook_deliveries (endpoint_id, subject, event_seq) WHERE state = 'PENDING';
-- The operator's list of DEAD deliveries, newest first, and the DEAD gauge.
CREATE INDEX webhook_deliveries_dead_idx ON webhook_deliveries (updated_at) WHERE state = 'DEAD';
