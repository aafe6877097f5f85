//! Endpoint signing secrets sealed at rest: XChaCha20-Poly1305 under `WEBHOOK_SECRET_KEY`
//! ([`paysaga_common::sealing`]), each bound to its endpoint's id, so a copy of the
//! database alone signs nothing.

use paysaga_common::{
    config::{ConfigError, Secrets},
    sealing::{self, Purpose},
};
use uuid::Uuid;

/// The variable holding the key: base64 of 32 random bytes.
pub const KEY_VAR: &str = "WEBHOOK_SECRET_KEY";

/// What this key seals. The label and context are those every stored secret was sealed
/// with: changing either makes them unopenable.
static PURPOSE: Purpose = Purpose {
    var: KEY_VAR,
    development_label: "paysaga DEVELOPMENT ONLY webhook secret key",
    context: b"paysaga webhook signing secret:",
};

/// A sealed value that does not open under the configured key (another key sealed it,
/// or it was altered).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a webhook secret does not open with WEBHOOK_SECRET_KEY (sealed under another key, or altered)"
)]
pub struct Unsealable;

/// The key endpoint secrets are sealed with.
#[derive(Clone, Debug)]
pub struct SealingKey(sealing::SealingKey);

impl SealingKey {
    /// DEVELOPMENT ONLY: a key derived from a public string; anyone can open what it
    /// seals. Used for an unset `WEBHOOK_SECRET_KEY` in development mode only.
    pub fn development() -> Self {
        Self(sealing::SealingKey::development(&PURPOSE))
    }

    pub fn is_development(&self) -> bool {
        self.0.is_development()
    }

    /// A fresh key from the operating system's random source.
    pub fn generate() -> Self {
        Self(sealing::SealingKey::generate(&PURPOSE))
    }

    /// The key as `WEBHOOK_SECRET_KEY` holds it.
    pub fn to_base64(&self) -> String {
        self.0.to_base64()
    }

    /// `WEBHOOK_SECRET_KEY` from the environment (unset: the development key in
    /// development mode, else recorded as missing; the development key configured is
    /// refused).
    pub fn from_secrets(secrets: &mut Secrets) -> Result<Self, ConfigError> {
        sealing::SealingKey::from_secrets(&PURPOSE, secrets).map(Self)
    }

    /// The key `value` gives, as [`Self::from_secrets`] reads it.
    pub fn from_setting(secrets: &mut Secrets, value: Option<&str>) -> Result<Self, ConfigError> {
        sealing::SealingKey::from_setting(&PURPOSE, secrets, value).map(Self)
    }

    /// `secret` sealed for `endpoint`: a fresh random nonce each time.
    pub fn seal(&self, endpoint: Uuid, secret: &str) -> Vec<u8> {
        self.0.seal(endpoint.as_bytes(), secret.as_bytes())
    }

    /// The secret `sealed` holds, if it opens for `endpoint` under this key.
    pub fn open(&self, endpoint: Uuid, sealed: &[u8]) -> Result<String, Unsealable> {
        let plain = self
            .0
            .open(endpoint.as_bytes(), sealed)
            .map_err(|_| Unsealable)?;
        String::from_utf8(plain).map_err(|_| Unsealable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_for_its_endpoint_under_its_key() {
        let key = SealingKey::generate();
        let endpoint = Uuid::now_v7();
        let sealed = key.seal(endpoint, "whsec_00112233");
        assert_eq!(key.open(endpoint, &sealed).as_deref(), Ok("whsec_00112233"));
        assert_eq!(key.open(Uuid::now_v7(), &sealed), Err(Unsealable));
        assert_eq!(
            SealingKey::generate().open(endpoint, &sealed),
            Err(Unsealable)
        );
    }

    /// The stored format is unchanged: a secret sealed with the development key opens
    /// with the cipher built by hand the way secrets were first sealed (the key the
    /// SHA-256 of the label, format byte 1, a 24-byte nonce, the context and the
    /// endpoint's id as associated data).
    #[test]
    fn the_stored_format_is_the_one_secrets_were_first_sealed_in() {
        use chacha20poly1305::{
            aead::{Aead, KeyInit, Payload},
            XChaCha20Poly1305,
        };
        use sha2::{Digest, Sha256};
        let endpoint = Uuid::now_v7();
        let sealed = SealingKey::development().seal(endpoint, "whsec_stable");
        assert_eq!(sealed[0], 1);
        let key: [u8; 32] = Sha256::digest(b"paysaga DEVELOPMENT ONLY webhook secret key").into();
        let plain = XChaCha20Poly1305::new(&key.into())
            .decrypt(
                sealed[1..25].into(),
                Payload {
                    msg: &sealed[25..],
                    aad: &[&b"paysaga webhook signing secret:"[..], endpoint.as_bytes()].concat(),
                },
            )
            .expect("opens as first sealed");
        assert_eq!(plain, b"whsec_stable");
    }
}
