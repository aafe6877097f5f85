-- Members, their refresh tokens, and the record of failed sign-ins that throttling reads.

CREATE TABLE members (
    -- A UUIDv7: the member id, the `sub` of its buyer tokens, its account's member_id.
    id UUID PRIMARY KEY,
    -- Normalised (trimmed, lower-cased) before it gets here.
    email TEXT NOT NULL,
    -- An Argon2id PHC string: algorithm, parameters, salt and hash together.
    password_hash TEXT NOT NULL,
    -- The member's account in the account service; NULL until it is opened.
    account_id BIGINT,
    -- What the account is opened with, so every attempt (sign-up, retry, repair) asks
    -- the account service for exactly the same opening.
    opening_balance BIGINT NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT members_email_unique UNIQUE (email),
    CONSTRAINT members_email_normalised CHECK (email = lower(btrim(email)) AND length(email) BETWEEN 3 AND 254),
    CONSTRAINT members_password_hash_phc CHECK (password_hash LIKE '$argon2%'),
    CONSTRAINT members_opening_balance_nonnegative CHECK (opening_balance >= 0)
);

-- The repair job reads the members whose account is still to be opened.
CREATE INDEX members_account_pending ON members (created_at) WHERE account_id IS NULL;

-- Refresh tokens, stored only as SHA-256 hashes. Each use marks the token used and
-- issues the next one in the same family; a used token presented again revokes it all.
CREATE TABLE refresh_tokens (
    token_hash BYTEA PRIMARY KEY,
    family_id UUID NOT NULL,
    member_id UUID NOT NULL CONSTRAINT refresh_tokens_member_fk REFERENCES members (id) ON DELETE CASCADE,
    issued_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    used_at TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ,
    CONSTRAINT refresh_tokens_hash_length CHECK (length(token_hash) = 32),
    CONSTRAINT refresh_tokens_expiry_after_issue CHECK (expires_at > issued_at)
);

CREATE INDEX refresh_tokens_family ON refresh_tokens (family_id);
CREATE INDEX refresh_tokens_expires ON refresh_tokens (expires_at);

-- Failed sign-ins per subject (a hashed normalised email, or a client address) in the
-- current window. Kept here, not in memory, so every instance sees the same count.
CREATE TABLE sign_in_failures (
    scope TEXT NOT NULL CONSTRAINT sign_in_failures_scope_known CHECK (scope IN ('EMAIL', 'ADDRESS')),
    subject BYTEA NOT NULL,
    failures INTEGER NOT NULL CONSTRAINT sign_in_failures_positive CHECK (failures > 0),
    window_start TIMESTAMPTZ NOT NULL,
    CONSTRAINT sign_in_failures_pkey PRIMARY KEY (scope, subject)
);

CREATE INDEX sign_in_failures_window ON sign_in_failures (window_start);
