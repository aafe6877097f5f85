-- Endpoint signing secrets sealed at rest (XChaCha20-Poly1305 under WEBHOOK_SECRET_KEY,
-- bound to the endpoint's id), a previous secret kept through a rotation's grace, and
-- delivery failures recorded as a class instead of the remote's text.
ALTER TABLE webhook_endpoints
    -- The plaintext secret of an endpoint made before secrets were sealed: the service
    -- seals it at start-up and clears it; no new row writes it.
    ALTER COLUMN secret DROP NOT NULL,
    -- The current secret, sealed: format byte, 24-byte nonce, ciphertext and tag.
    ADD COLUMN secret_sealed BYTEA NULL,
    -- The secret before the last rotation, sealed, and until when deliveries are still
    -- signed with it too.
    ADD COLUMN previous_secret_sealed BYTEA NULL,
    ADD COLUMN previous_secret_expires_at TIMESTAMPTZ NULL,
    ADD CONSTRAINT webhook_endpoints_one_secret
        CHECK ((secret IS NULL) <> (secret_sealed IS NULL)),
    ADD CONSTRAINT webhook_endpoints_previous_secret_paired
        CHECK ((previous_secret_sealed IS NULL) = (previous_secret_expires_at IS NULL)),
    ADD CONSTRAINT webhook_endpoints_previous_secret_sealed
        CHECK (previous_secret_sealed IS NULL OR secret_sealed IS NOT NULL);

-- A failure's free text (which could carry what an internal service answered) becomes
-- its class; the status, when there was one, is in last_status already.
UPDATE webhook_deliveries
SET last_error = CASE
        WHEN last_error LIKE 'answered %' THEN 'http_status'
        WHEN last_error LIKE 'no answer within %' THEN 'timeout'
        WHEN last_error LIKE 'connection failed%' THEN 'connect'
        ELSE 'request'
    END
WHERE last_error IS NOT NULL;

ALTER TABLE webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_last_error_class CHECK (
        last_error IS NULL
        OR last_error IN ('forbidden_address', 'dns', 'connect', 'timeout', 'http_status', 'request'));
