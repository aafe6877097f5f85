-- Failed sign-ins are also counted per pair (a hashed email with a hashed client
-- address), and sign-ups per client address and in total, so every instance of the
-- service refuses the same senders.

ALTER TABLE sign_in_failures
    DROP CONSTRAINT sign_in_failures_scope_known,
    ADD CONSTRAINT sign_in_failures_scope_known CHECK (scope IN ('PAIR', 'EMAIL', 'ADDRESS'));

-- Sign-ups per subject in the current window: scope ADDRESS with a hashed client
-- address, or scope TOTAL with the empty subject for every sign-up at all. Each scope
-- has its own window length, passed in by the service.
CREATE TABLE sign_up_attempts (
    scope TEXT NOT NULL CONSTRAINT sign_up_attempts_scope_known CHECK (scope IN ('ADDRESS', 'TOTAL')),
    subject BYTEA NOT NULL,
    attempts INTEGER NOT NULL CONSTRAINT sign_up_attempts_positive CHECK (attempts > 0),
    window_start TIMESTAMPTZ NOT NULL,
    CONSTRAINT sign_up_attempts_pkey PRIMARY KEY (scope, subject)
);

CREATE INDEX sign_up_attempts_window ON sign_up_attempts (window_start);
