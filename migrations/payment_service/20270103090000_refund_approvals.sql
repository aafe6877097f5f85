-- Four eyes for money: a refund of a payment above STAFF_FOUR_EYES_ABOVE is not
-- carried out when asked for; it waits here for an admin other than the one who asked.
-- The decision is one conditional UPDATE (WHERE state = 'PENDING'), so of two admins
-- deciding at once one wins and one refund is made. The service role may read, add
-- and update rows (migrations/grants/payment_service.sql grants every table of the
-- schema; it grants DELETE too, which nothing in the service uses).
CREATE TABLE refund_approvals (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id         UUID NOT NULL,
    -- The payment's amount (minor units) when the refund was asked for.
    amount             BIGINT NOT NULL,
    -- Who asked: the staff member (NULL: the operator tools' service credential) and
    -- their name as the audit trail gives it (no foreign key to staff: the record
    -- outlives anything it names, like audit_log).
    requested_by       BIGINT,
    requested_by_name  TEXT NOT NULL,
    requested_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    reason             TEXT,
    state              TEXT NOT NULL DEFAULT 'PENDING',
    decided_by         BIGINT,
    decided_by_name    TEXT,
    decided_at         TIMESTAMPTZ,
    decision_reason    TEXT,
    CONSTRAINT refund_approvals_payment_fkey FOREIGN KEY (payment_id) REFERENCES payments (id),
    CONSTRAINT refund_approvals_state_known CHECK (state IN ('PENDING', 'APPROVED', 'REJECTED')),
    -- Decided exactly when it has left PENDING, and then by a person (a staff id: the
    -- operator tools' credential decides nothing).
    CONSTRAINT refund_approvals_decided_when_not_pending CHECK (
        (state = 'PENDING') = (decided_at IS NULL)
        AND (state = 'PENDING') = (decided_by IS NULL)),
    -- Four eyes: whoever asked never decides.
    CONSTRAINT refund_approvals_two_people CHECK (
        requested_by IS NULL OR decided_by IS NULL OR requested_by <> decided_by)
);

-- At most one approval awaits per payment: asking again answers the pending one.
CREATE UNIQUE INDEX refund_approvals_one_pending
    ON refund_approvals (payment_id) WHERE state = 'PENDING';
-- The list, filtered by state, newest first.
CREATE INDEX refund_approvals_state ON refund_approvals (state, id);

-- The audit trail names the approvals' actions.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_action_known;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_action_known CHECK (action IN (
    'SIGN_IN', 'SIGN_IN_FAILED', 'SIGN_OUT', 'STAFF_CREATED', 'PAYMENT_RESUMED',
    'PAYMENT_REFUNDED', 'WEBHOOK_REPLAYED', 'WEBHOOK_ENDPOINT_CREATED',
    'WEBHOOK_ENDPOINT_CHANGED', 'PRODUCT_CHANGED', 'TOP_UP', 'REFUND_REQUESTED',
    'REFUND_APPROVED', 'REFUND_REJECTED'));
