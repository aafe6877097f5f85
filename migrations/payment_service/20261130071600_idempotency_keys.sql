-- HTTP Idempotency-Key records: one per (member, operation, key), kept until expires_at.
CREATE TABLE idempotency_keys (
    member_id TEXT NOT NULL,
    operation TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    -- sha256 over operation, member and the normalised body.
    fingerprint TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'PROCESSING',
    -- The request currently executing it; only it may write the result.
    owner_token UUID NULL,
    lease_until TIMESTAMPTZ NULL,
    payment_id UUID NULL,
    response_status INTEGER NULL,
    -- Stored as sent, byte for byte, so a replay is identical.
    response_body TEXT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (member_id, operation, idem_key),
    CONSTRAINT idempotency_keys_status_known CHECK (status IN ('PROCESSING', 'COMPLETED')),
    CONSTRAINT idempotency_keys_completed_has_response CHECK (
        status = 'PROCESSING' OR (response_status IS NOT NULL AND response_body IS NOT NULL)),
    CONSTRAINT idempotency_keys_payment_fkey FOREIGN KEY (payment_id) REFERENCES payments (id)
);

CREATE INDEX idempotency_keys_expiry_idx ON idempotency_keys (expires_at);
