//! Endpoint signing secrets sealed at rest: XChaCha20-Poly1305 under `WEBHOOK_SECRET_KEY`,
//! each bound to its endpoint's id, so a copy of the database alone signs nothing.

use base64::{
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
    Engine,
};
use chacha20poly1305::{
    aead::{Aead, AeadCore, KeyInit, OsRng, Payload},
    XChaCha20Poly1305,
};
use paysaga_common::config::{ConfigError, Secrets};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The variable holding the key: base64 of 32 random bytes.
pub const KEY_VAR: &str = "WEBHOOK_SECRET_KEY";

/// The first byte of every sealed secret: the format (this cipher, a 24-byte nonce
/// after it, then the ciphertext and its tag), so another can follow.
const FORMAT: u8 = 1;
const NONCE_LEN: usize = 24;
/// The label the development key is derived from: public, so anyone can open what it
/// sealed.
const DEVELOPMENT_LABEL: &str = "paysaga DEVELOPMENT ONLY webhook secret key";
/// Associated data: what a sealed value is, and (appended) whose.
const CONTEXT: &[u8] = b"paysaga webhook signing secret:";

/// A sealed value that does not open under the configured key (another key sealed it,
/// or it was altered).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a webhook secret does not open with WEBHOOK_SECRET_KEY (sealed under another key, or altered)"
)]
pub struct Unsealable;

/// The key endpoint secrets are sealed with.
#[derive(Clone)]
pub struct SealingKey([u8; 32]);

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let which = if self.is_development() {
            "development"
        } else {
            "configured"
        };
        write!(f, "SealingKey(<{which}>)")
    }
}

impl SealingKey {
    /// DEVELOPMENT ONLY: a key derived from a public string; anyone can open what it
    /// seals. Used for an unset `WEBHOOK_SECRET_KEY` in development mode only.
    pub fn development() -> Self {
        Self(Sha256::digest(DEVELOPMENT_LABEL.as_bytes()).into())
    }

    pub fn is_development(&self) -> bool {
        self.0 == Self::development().0
    }

    /// A fresh key from the operating system's random source.
    pub fn generate() -> Self {
        Self(XChaCha20Poly1305::generate_key(&mut OsRng).into())
    }

    /// The key as `WEBHOOK_SECRET_KEY` holds it.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// A key given as base64 (standard or URL-safe) of 32 bytes.
    pub fn from_base64(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bytes = STANDARD
            .decode(s)
            .or_else(|_| URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')))
            .map_err(|_| "not valid base64".to_owned())?;
        let len = bytes.len();
        let key: [u8; 32] = bytes
            .try_into()
            .map_err(|_| format!("must be 32 bytes, got {len}"))?;
        Ok(Self(key))
    }

    /// `WEBHOOK_SECRET_KEY` from the environment, by [`Self::from_setting`].
    pub fn from_secrets(secrets: &mut Secrets) -> Result<Self, ConfigError> {
        Self::from_setting(secrets, std::env::var(KEY_VAR).ok().as_deref())
    }

    /// The key `value` gives: unset (or blank), the development key in development mode
    /// and missing otherwise (recorded in `secrets`); the development key configured
    /// explicitly is refused in any mode, as every development key is.
    pub fn from_setting(secrets: &mut Secrets, value: Option<&str>) -> Result<Self, ConfigError> {
        let refused = |reason: String| ConfigError {
            name: KEY_VAR.to_owned(),
            value: "<redacted>".to_owned(),
            reason,
        };
        let Some(v) = value.filter(|v| !v.trim().is_empty()) else {
            secrets.unset(KEY_VAR);
            return Ok(Self::development());
        };
        let key = Self::from_base64(v).map_err(refused)?;
        if key.is_development() {
            return Err(refused(
                "is the public DEVELOPMENT key (anyone can open what it seals); configure a key of your own"
                    .to_owned(),
            ));
        }
        Ok(key)
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.0.into())
    }

    fn aad(endpoint: Uuid) -> Vec<u8> {
        [CONTEXT, endpoint.as_bytes()].concat()
    }

    /// `secret` sealed for `endpoint`: a fresh random nonce each time.
    pub fn seal(&self, endpoint: Uuid, secret: &str) -> Vec<u8> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher()
            .encrypt(
                &nonce,
                Payload {
                    msg: secret.as_bytes(),
                    aad: &Self::aad(endpoint),
                },
            )
            .expect("XChaCha20-Poly1305 seals any secret of this size");
        let mut out = Vec::with_capacity(1 + NONCE_LEN + sealed.len());
        out.push(FORMAT);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// The secret `sealed` holds, if it opens for `endpoint` under this key.
    pub fn open(&self, endpoint: Uuid, sealed: &[u8]) -> Result<String, Unsealable> {
        let Some((&FORMAT, rest)) = sealed.split_first() else {
            return Err(Unsealable);
        };
        if rest.len() < NONCE_LEN {
            return Err(Unsealable);
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let plain = self
            .cipher()
            .decrypt(
                nonce.into(),
                Payload {
                    msg: ciphertext,
                    aad: &Self::aad(endpoint),
                },
            )
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
        let secret = "whsec_00112233";
        let sealed = key.seal(endpoint, secret);
        assert!(!sealed.windows(secret.len()).any(|w| w == secret.as_bytes()));
        assert_ne!(
            sealed,
            key.seal(endpoint, secret),
            "a fresh nonce each time"
        );
        assert_eq!(key.open(endpoint, &sealed).as_deref(), Ok(secret));
        assert_eq!(key.open(Uuid::now_v7(), &sealed), Err(Unsealable));
        assert_eq!(
            SealingKey::generate().open(endpoint, &sealed),
            Err(Unsealable)
        );
        let mut altered = sealed.clone();
        *altered.last_mut().expect("bytes") ^= 1;
        assert_eq!(key.open(endpoint, &altered), Err(Unsealable));
        assert_eq!(key.open(endpoint, &[]), Err(Unsealable));
        assert_eq!(key.open(endpoint, &[FORMAT, 1, 2]), Err(Unsealable));
    }

    #[test]
    fn the_key_comes_from_configuration_and_the_development_key_only_when_unset_in_development() {
        let own = SealingKey::generate();
        let mut prod = Secrets::new(false);
        let read = SealingKey::from_setting(&mut prod, Some(&own.to_base64())).expect("own key");
        assert_eq!(read.0, own.0);
        assert!(prod.finish().is_ok());

        let mut prod = Secrets::new(false);
        SealingKey::from_setting(&mut prod, None).expect("recorded as missing");
        let missing = prod.finish().expect_err("missing outside development mode");
        assert_eq!(missing.0, vec![KEY_VAR.to_owned()]);

        let mut dev = Secrets::new(true);
        let fallback = SealingKey::from_setting(&mut dev, Some(" ")).expect("development key");
        assert!(fallback.is_development());
        assert_eq!(
            dev.finish().expect("development").0,
            vec![KEY_VAR.to_owned()]
        );

        let dev_key = SealingKey::development().to_base64();
        for mode in [false, true] {
            let refused = SealingKey::from_setting(&mut Secrets::new(mode), Some(&dev_key))
                .expect_err("the development key configured");
            assert!(refused.to_string().contains("DEVELOPMENT"), "{refused}");
        }
        for bad in ["not base64!", "AAAA"] {
            let refused =
                SealingKey::from_setting(&mut Secrets::new(true), Some(bad)).expect_err("refused");
            assert_eq!(refused.name, KEY_VAR);
            assert!(
                !refused.to_string().contains(bad),
                "the value is not echoed"
            );
        }
        assert!(!format!("{own:?}").contains(&own.to_base64()));
    }
}
