-- Staff: the people who run paysaga, each signing in as themselves (a password and a
-- TOTP second factor) into a short-lived session, acting in one role; and the
-- append-only audit trail of what they do.

CREATE TABLE staff (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Lower-cased and trimmed.
    email           TEXT NOT NULL,
    -- An Argon2id PHC string (the shared password rules).
    password_hash   TEXT NOT NULL,
    role            TEXT NOT NULL,
    -- The TOTP secret (RFC 6238, 20 bytes).
    totp_secret     BYTEA NOT NULL,
    -- The last TOTP step a code was accepted for: a code of that step or an earlier one
    -- is refused, so no code works twice.
    totp_last_step  BIGINT NOT NULL DEFAULT 0,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT staff_email_unique UNIQUE (email),
    CONSTRAINT staff_role_known CHECK (role IN ('VIEWER', 'OPERATOR', 'ADMIN'))
);

-- Single-use recovery codes, by their SHA-256.
CREATE TABLE staff_recovery_codes (
    staff_id    BIGINT NOT NULL REFERENCES staff (id) ON DELETE CASCADE,
    code_hash   BYTEA NOT NULL,
    used_at     TIMESTAMPTZ,
    CONSTRAINT staff_recovery_codes_pkey PRIMARY KEY (staff_id, code_hash)
);

-- Sessions, by the SHA-256 of their token (the token itself is only ever in the
-- person's cookie or CLI). SECOND_FACTOR: the password was right, the code is awaited;
-- ACTIVE: signed in. Sign-out deletes the row.
CREATE TABLE staff_sessions (
    token_hash  BYTEA PRIMARY KEY,
    staff_id    BIGINT NOT NULL REFERENCES staff (id) ON DELETE CASCADE,
    stage       TEXT NOT NULL,
    -- Wrong codes given for this session (SECOND_FACTOR); at the limit it is deleted.
    failures    INT NOT NULL DEFAULT 0,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL,
    CONSTRAINT staff_sessions_stage_known CHECK (stage IN ('SECOND_FACTOR', 'ACTIVE'))
);

CREATE INDEX staff_sessions_expiry ON staff_sessions (expires_at);
CREATE INDEX staff_sessions_staff ON staff_sessions (staff_id);

-- What staff did. Append-only: the service role may insert and read, never update or
-- delete (migrations/grants/payment_service.sql).
CREATE TABLE audit_log (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    -- The staff member, when the actor is one (no foreign key: the trail outlives
    -- anything it names).
    staff_id     BIGINT,
    -- Their email (or the email tried, on a failed sign-in), or service:<role>.
    actor        TEXT NOT NULL,
    client_addr  INET,
    action       TEXT NOT NULL,
    target       TEXT,
    reason       TEXT,
    outcome      TEXT NOT NULL,
    detail       TEXT,
    CONSTRAINT audit_log_action_known CHECK (action IN (
        'SIGN_IN', 'SIGN_IN_FAILED', 'SIGN_OUT', 'STAFF_CREATED', 'PAYMENT_RESUMED',
        'PAYMENT_REFUNDED', 'WEBHOOK_REPLAYED', 'WEBHOOK_ENDPOINT_CREATED',
        'WEBHOOK_ENDPOINT_CHANGED', 'PRODUCT_CHANGED', 'TOP_UP')),
    CONSTRAINT audit_log_outcome_known CHECK (outcome IN ('DONE', 'REFUSED', 'FAILED'))
);

CREATE INDEX audit_log_actor ON audit_log (actor, id);
CREATE INDEX audit_log_target ON audit_log (target, id);
