-- Staff TOTP secrets sealed at rest (XChaCha20-Poly1305 under STAFF_SECRET_KEY, bound to
-- the person's email). Secrets stored in plaintext before this are sealed, and their
-- plaintext cleared, when the orchestrator starts; a row holds one form or the other.

ALTER TABLE staff ALTER COLUMN totp_secret DROP NOT NULL;
ALTER TABLE staff ADD COLUMN totp_secret_sealed BYTEA;
ALTER TABLE staff ADD CONSTRAINT staff_one_totp_secret
    CHECK ((totp_secret IS NULL) <> (totp_secret_sealed IS NULL));
