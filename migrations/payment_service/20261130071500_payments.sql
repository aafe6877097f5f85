-- Payments (saga instances) and their append-only step log.
CREATE TABLE payments (
    id UUID NOT NULL,
    member_id TEXT NOT NULL,
    account_id BIGINT NOT NULL,
    reservation_id UUID NOT NULL,
    amount BIGINT NOT NULL,
    state TEXT NOT NULL,
    -- The action still owed in this state (NULL: settled).
    pending_action TEXT NULL,
    -- Attempts of the pending action that ended unknown, since it became pending.
    attempts INTEGER NOT NULL DEFAULT 0,
    -- When recovery may next pick it up; NULL when settled or waiting for an operator.
    next_attempt_at TIMESTAMPTZ NULL,
    needs_attention BOOLEAN NOT NULL DEFAULT FALSE,
    last_error TEXT NULL,
    -- Why a payment FAILED, as the downstream said it (e.g. INSUFFICIENT_FUNDS).
    failure_code TEXT NULL,
    lease_owner UUID NULL,
    lease_until TIMESTAMPTZ NULL,
    -- Bumped by every recorded step: the compare-and-set guard.
    version BIGINT NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT payments_pkey PRIMARY KEY (id),
    -- One payment per reservation, ever: a second would debit twice for one unit.
    CONSTRAINT payments_reservation_unique UNIQUE (reservation_id),
    CONSTRAINT payments_amount_positive CHECK (amount > 0),
    CONSTRAINT payments_state_known CHECK (state IN (
        'PROCESSING', 'ACCOUNT_DEBITED', 'ORDER_CONFIRMED', 'COMPLETED',
        'FAILED', 'REFUND_PROCESSING', 'REFUNDED')),
    CONSTRAINT payments_pending_known CHECK (pending_action IS NULL OR pending_action IN (
        'DEBIT', 'CONFIRM', 'COMPLETE', 'CANCEL_RESERVATION', 'CANCEL_ORDER', 'REFUND')),
    CONSTRAINT payments_attempts_nonnegative CHECK (attempts >= 0),
    CONSTRAINT payments_settled_not_scheduled CHECK (pending_action IS NOT NULL OR next_attempt_at IS NULL)
);

-- Recovery's claim: due, unflagged payments in due order.
CREATE INDEX payments_due_idx ON payments (next_attempt_at) WHERE next_attempt_at IS NOT NULL AND NOT needs_attention;
CREATE INDEX payments_attention_idx ON payments (updated_at) WHERE needs_attention;
CREATE INDEX payments_state_idx ON payments (state, id);
CREATE INDEX payments_member_idx ON payments (member_id, id);

CREATE TABLE payment_steps (
    payment_id UUID NOT NULL,
    -- The payment's version this step produced: one step per version, so two drivers
    -- can never both record a move from the same version.
    seq BIGINT NOT NULL,
    action TEXT NOT NULL,
    operation_key TEXT NOT NULL,
    outcome TEXT NOT NULL,
    from_state TEXT NOT NULL,
    to_state TEXT NOT NULL,
    downstream_status INTEGER NULL,
    latency_ms INTEGER NOT NULL,
    error TEXT NULL,
    -- The instance that drove the step.
    driver UUID NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT payment_steps_pkey PRIMARY KEY (payment_id, seq),
    CONSTRAINT payment_steps_payment_fkey FOREIGN KEY (payment_id) REFERENCES payments (id),
    CONSTRAINT payment_steps_outcome_known CHECK (outcome IN ('SUCCEEDED', 'REJECTED', 'UNKNOWN', 'OPERATOR')),
    CONSTRAINT payment_steps_latency_nonnegative CHECK (latency_ms >= 0)
);
