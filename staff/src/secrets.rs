//! TOTP secrets sealed at rest under `STAFF_SECRET_KEY` ([`paysaga_common::sealing`]),
//! each bound to its person's email, so a copy of the database cannot make anyone's
//! second-factor codes.

use paysaga_common::{
    config::{ConfigError, Secrets},
    sealing::{Purpose, SealingKey, Unsealable},
};
use sqlx::PgPool;

/// The variable holding the key: base64 of 32 random bytes.
pub const KEY_VAR: &str = "STAFF_SECRET_KEY";

static PURPOSE: Purpose = Purpose {
    var: KEY_VAR,
    development_label: "paysaga DEVELOPMENT ONLY staff secret key",
    context: b"paysaga staff TOTP secret:",
};

/// The key staff TOTP secrets are sealed with.
#[derive(Clone, Debug)]
pub struct SecretKey(SealingKey);

impl SecretKey {
    /// DEVELOPMENT ONLY: derived from a public string; for an unset `STAFF_SECRET_KEY`
    /// in development mode (and tests) only.
    pub fn development() -> Self {
        Self(SealingKey::development(&PURPOSE))
    }

    /// A fresh key from the operating system's random source.
    pub fn generate() -> Self {
        Self(SealingKey::generate(&PURPOSE))
    }

    /// The key as `STAFF_SECRET_KEY` holds it.
    pub fn to_base64(&self) -> String {
        self.0.to_base64()
    }

    /// `STAFF_SECRET_KEY` from the environment (unset: the development key in
    /// development mode, else recorded as missing; the development key configured is
    /// refused).
    pub fn from_secrets(secrets: &mut Secrets) -> Result<Self, ConfigError> {
        SealingKey::from_secrets(&PURPOSE, secrets).map(Self)
    }

    /// The TOTP secret of the person with `email`, sealed.
    pub fn seal(&self, email: &str, secret: &[u8]) -> Vec<u8> {
        self.0.seal(email.as_bytes(), secret)
    }

    /// The TOTP secret `sealed` holds for the person with `email`.
    pub fn open(&self, email: &str, sealed: &[u8]) -> Result<Vec<u8>, Unsealable> {
        self.0.open(email.as_bytes(), sealed)
    }
}

/// Makes sure every TOTP secret is sealed under `key` before anyone signs in: refuses
/// to go on when `key` does not open the secrets sealed already (another key sealed
/// them: nobody could sign in), then seals those still in plaintext (made before secrets
/// were sealed) and clears the plaintext.
pub async fn seal_at_start(pool: &PgPool, key: &SecretKey) -> anyhow::Result<()> {
    let sealed: Option<(String, Vec<u8>)> = sqlx::query_as(
        r#"SELECT email, totp_secret_sealed FROM staff
           WHERE totp_secret_sealed IS NOT NULL ORDER BY id LIMIT 1"#,
    )
    .fetch_optional(pool)
    .await?;
    if let Some((email, sealed)) = sealed {
        anyhow::ensure!(
            key.open(&email, &sealed).is_ok(),
            "{KEY_VAR} does not open the staff TOTP secrets stored in the database (they \
             were sealed under another key); start with the key that sealed them"
        );
    }
    let plain: Vec<(i64, String, Vec<u8>)> =
        sqlx::query_as(r#"SELECT id, email, totp_secret FROM staff WHERE totp_secret IS NOT NULL"#)
            .fetch_all(pool)
            .await?;
    for (id, email, secret) in &plain {
        sqlx::query(
            r#"UPDATE staff SET totp_secret_sealed = $2, totp_secret = NULL
               WHERE id = $1 AND totp_secret IS NOT NULL"#,
        )
        .bind(id)
        .bind(key.seal(email, secret))
        .execute(pool)
        .await?;
    }
    if !plain.is_empty() {
        tracing::info!(
            sealed = plain.len(),
            "staff TOTP secrets stored in plaintext sealed, plaintext cleared"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_opens_for_its_person_under_its_key_only() {
        let key = SecretKey::generate();
        let sealed = key.seal("alice@example.com", b"0123456789abcdefghij");
        assert_eq!(
            key.open("alice@example.com", &sealed).as_deref(),
            Ok(&b"0123456789abcdefghij"[..])
        );
        assert!(key.open("bob@example.com", &sealed).is_err());
        assert!(SecretKey::generate()
            .open("alice@example.com", &sealed)
            .is_err());
        assert!(SecretKey::development()
            .open("alice@example.com", &sealed)
            .is_err());
    }
}
