-- Four eyes for money covers top-ups as well as refunds: a top-up above
-- STAFF_TOP_UP_FOUR_EYES_ABOVE waits, like a refund above STAFF_FOUR_EYES_ABOVE, for an
-- admin other than the one who asked. One table holds both kinds of approval, so one
-- list, one decision statement and one set of rules (two people, decided once) serve
-- both; `kind` says which, and which target the row names: a refund names its payment,
-- a top-up its member and the deposit's operation key.
ALTER TABLE refund_approvals RENAME TO approvals;
ALTER SEQUENCE refund_approvals_id_seq RENAME TO approvals_id_seq;
ALTER TABLE approvals RENAME CONSTRAINT refund_approvals_payment_fkey TO approvals_payment_fkey;
ALTER TABLE approvals RENAME CONSTRAINT refund_approvals_state_known TO approvals_state_known;
ALTER TABLE approvals RENAME CONSTRAINT refund_approvals_decided_when_not_pending
    TO approvals_decided_when_not_pending;
ALTER TABLE approvals RENAME CONSTRAINT refund_approvals_two_people TO approvals_two_people;
ALTER INDEX refund_approvals_pkey RENAME TO approvals_pkey;
ALTER INDEX refund_approvals_one_pending RENAME TO approvals_one_pending_refund;
ALTER INDEX refund_approvals_state RENAME TO approvals_state;

-- Every approval made before this migration is a refund's (and a row written without a
-- kind is one).
ALTER TABLE approvals
    ADD COLUMN kind TEXT NOT NULL DEFAULT 'REFUND',
    ADD COLUMN member_id UUID,
    -- The deposit's operation key (`topup:<key>`): the top-up's idempotency key.
    ADD COLUMN operation_key TEXT,
    ALTER COLUMN payment_id DROP NOT NULL,
    ADD CONSTRAINT approvals_kind_known CHECK (kind IN ('REFUND', 'TOP_UP')),
    ADD CONSTRAINT approvals_kind_target CHECK (
        (kind = 'REFUND' AND payment_id IS NOT NULL AND member_id IS NULL
            AND operation_key IS NULL)
        OR (kind = 'TOP_UP' AND payment_id IS NULL AND member_id IS NOT NULL
            AND operation_key IS NOT NULL)),
    ADD CONSTRAINT approvals_amount_positive CHECK (amount > 0);

-- A top-up's key is one top-up: asking again with it answers the approval it made,
-- whatever its state (a rejected top-up's key is spent).
CREATE UNIQUE INDEX approvals_one_per_top_up_key
    ON approvals (operation_key) WHERE kind = 'TOP_UP';

-- The audit trail names the top-ups' approvals.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_action_known;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_action_known CHECK (action IN (
    'SIGN_IN', 'SIGN_IN_FAILED', 'SIGN_OUT', 'STAFF_CREATED', 'PAYMENT_RESUMED',
    'PAYMENT_REFUNDED', 'WEBHOOK_REPLAYED', 'WEBHOOK_ENDPOINT_CREATED',
    'WEBHOOK_ENDPOINT_CHANGED', 'PRODUCT_CHANGED', 'TOP_UP', 'REFUND_REQUESTED',
    'REFUND_APPROVED', 'REFUND_REJECTED', 'TOP_UP_REQUESTED', 'TOP_UP_APPROVED',
    'TOP_UP_REJECTED'));
