//! Secrets sealed at rest: XChaCha20-Poly1305 under a key from the environment, each
//! sealed value bound to what it is (its purpose) and whose it is (its owner), so a copy
//! of the database alone opens nothing.

use base64::{
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
    Engine,
};
use chacha20poly1305::{
    aead::{Aead, AeadCore, KeyInit, OsRng, Payload},
    XChaCha20Poly1305,
};
use sha2::{Digest, Sha256};

use crate::config::{ConfigError, Secrets};

/// The first byte of every sealed value: the format (this cipher, a 24-byte nonce
/// after it, then the ciphertext and its tag), so another can follow.
const FORMAT: u8 = 1;
const NONCE_LEN: usize = 24;

/// What a key seals: the variable it is configured in, the public label its
/// development key is derived from, and the associated data every value sealed for this
/// purpose carries (the owner's bytes are appended).
#[derive(Debug)]
pub struct Purpose {
    pub var: &'static str,
    pub development_label: &'static str,
    pub context: &'static [u8],
}

/// A sealed value that does not open under the configured key (another key sealed it,
/// it was altered, or it belongs to another owner).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a sealed secret does not open with {0} (sealed under another key, or altered)")]
pub struct Unsealable(pub &'static str);

/// A key for one [`Purpose`].
#[derive(Clone)]
pub struct SealingKey {
    key: [u8; 32],
    purpose: &'static Purpose,
}

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let which = if self.is_development() {
            "development"
        } else {
            "configured"
        };
        write!(f, "SealingKey({}: <{which}>)", self.purpose.var)
    }
}

impl SealingKey {
    /// DEVELOPMENT ONLY: a key derived from the purpose's public label; anyone can open
    /// what it seals. Used for an unset key in development mode only.
    pub fn development(purpose: &'static Purpose) -> Self {
        Self {
            key: Sha256::digest(purpose.development_label.as_bytes()).into(),
            purpose,
        }
    }

    pub fn is_development(&self) -> bool {
        self.key == Self::development(self.purpose).key
    }

    /// A fresh key from the operating system's random source.
    pub fn generate(purpose: &'static Purpose) -> Self {
        Self {
            key: XChaCha20Poly1305::generate_key(&mut OsRng).into(),
            purpose,
        }
    }

    /// The key as its variable holds it.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.key)
    }

    /// A key given as base64 (standard or URL-safe) of 32 bytes.
    pub fn from_base64(purpose: &'static Purpose, s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bytes = STANDARD
            .decode(s)
            .or_else(|_| URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')))
            .map_err(|_| "not valid base64".to_owned())?;
        let len = bytes.len();
        let key: [u8; 32] = bytes
            .try_into()
            .map_err(|_| format!("must be 32 bytes, got {len}"))?;
        Ok(Self { key, purpose })
    }

    /// The purpose's variable from the environment, by [`Self::from_setting`].
    pub fn from_secrets(
        purpose: &'static Purpose,
        secrets: &mut Secrets,
    ) -> Result<Self, ConfigError> {
        Self::from_setting(purpose, secrets, std::env::var(purpose.var).ok().as_deref())
    }

    /// The key `value` gives: unset (or blank), the development key in development mode
    /// and missing otherwise (recorded in `secrets`); the development key configured
    /// explicitly is refused in any mode, as every development key is.
    pub fn from_setting(
        purpose: &'static Purpose,
        secrets: &mut Secrets,
        value: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let refused = |reason: String| ConfigError {
            name: purpose.var.to_owned(),
            value: "<redacted>".to_owned(),
            reason,
        };
        let Some(v) = value.filter(|v| !v.trim().is_empty()) else {
            secrets.unset(purpose.var);
            return Ok(Self::development(purpose));
        };
        let key = Self::from_base64(purpose, v).map_err(refused)?;
        if key.is_development() {
            return Err(refused(
                "is the public DEVELOPMENT key (anyone can open what it seals); configure a key of your own"
                    .to_owned(),
            ));
        }
        Ok(key)
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.key.into())
    }

    fn aad(&self, owner: &[u8]) -> Vec<u8> {
        [self.purpose.context, owner].concat()
    }

    /// `secret` sealed for `owner`: a fresh random nonce each time.
    pub fn seal(&self, owner: &[u8], secret: &[u8]) -> Vec<u8> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher()
            .encrypt(
                &nonce,
                Payload {
                    msg: secret,
                    aad: &self.aad(owner),
                },
            )
            .expect("XChaCha20-Poly1305 seals any secret of this size");
        let mut out = Vec::with_capacity(1 + NONCE_LEN + sealed.len());
        out.push(FORMAT);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// The secret `sealed` holds, if it opens for `owner` under this key.
    pub fn open(&self, owner: &[u8], sealed: &[u8]) -> Result<Vec<u8>, Unsealable> {
        let unsealable = Unsealable(self.purpose.var);
        let Some((&FORMAT, rest)) = sealed.split_first() else {
            return Err(unsealable);
        };
        if rest.len() < NONCE_LEN {
            return Err(unsealable);
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        self.cipher()
            .decrypt(
                nonce.into(),
                Payload {
                    msg: ciphertext,
                    aad: &self.aad(owner),
                },
            )
            .map_err(|_| unsealable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static ONE: Purpose = Purpose {
        var: "ONE_KEY",
        development_label: "paysaga DEVELOPMENT ONLY test key one",
        context: b"one:",
    };
    static TWO: Purpose = Purpose {
        var: "TWO_KEY",
        development_label: "paysaga DEVELOPMENT ONLY test key two",
        context: b"two:",
    };

    #[test]
    fn a_sealed_secret_opens_only_for_its_owner_and_purpose_under_its_key() {
        let key = SealingKey::generate(&ONE);
        let secret = b"whsec_00112233";
        let sealed = key.seal(b"alice", secret);
        assert!(!sealed.windows(secret.len()).any(|w| w == secret));
        assert_ne!(
            sealed,
            key.seal(b"alice", secret),
            "a fresh nonce each time"
        );
        assert_eq!(key.open(b"alice", &sealed).as_deref(), Ok(&secret[..]));
        let refused = Err(Unsealable("ONE_KEY"));
        assert_eq!(key.open(b"bob", &sealed), refused);
        assert_eq!(SealingKey::generate(&ONE).open(b"alice", &sealed), refused);
        // The same key bytes for another purpose open nothing of this one's.
        let other = SealingKey::from_base64(&TWO, &key.to_base64()).expect("key");
        assert!(other.open(b"alice", &sealed).is_err());
        let mut altered = sealed.clone();
        *altered.last_mut().expect("bytes") ^= 1;
        assert_eq!(key.open(b"alice", &altered), refused);
        assert_eq!(key.open(b"alice", &[]), refused);
        assert_eq!(key.open(b"alice", &[FORMAT, 1, 2]), refused);
    }

    #[test]
    fn the_key_comes_from_configuration_and_the_development_key_only_when_unset_in_development() {
        let own = SealingKey::generate(&ONE);
        let mut prod = Secrets::new(false);
        let read =
            SealingKey::from_setting(&ONE, &mut prod, Some(&own.to_base64())).expect("own key");
        assert_eq!(read.key, own.key);
        assert!(prod.finish().is_ok());

        let mut prod = Secrets::new(false);
        SealingKey::from_setting(&ONE, &mut prod, None).expect("recorded as missing");
        let missing = prod.finish().expect_err("missing outside development mode");
        assert_eq!(missing.0, vec!["ONE_KEY".to_owned()]);

        let mut dev = Secrets::new(true);
        let fallback =
            SealingKey::from_setting(&ONE, &mut dev, Some(" ")).expect("development key");
        assert!(fallback.is_development());
        assert_eq!(
            dev.finish().expect("development").0,
            vec!["ONE_KEY".to_owned()]
        );
        assert_ne!(
            SealingKey::development(&ONE).key,
            SealingKey::development(&TWO).key,
            "each purpose its own development key"
        );

        let dev_key = SealingKey::development(&ONE).to_base64();
        for mode in [false, true] {
            let refused = SealingKey::from_setting(&ONE, &mut Secrets::new(mode), Some(&dev_key))
                .expect_err("the development key configured");
            assert!(refused.to_string().contains("DEVELOPMENT"), "{refused}");
        }
        for bad in ["not base64!", "AAAA"] {
            let refused = SealingKey::from_setting(&ONE, &mut Secrets::new(true), Some(bad))
                .expect_err("refused");
            assert_eq!(refused.name, "ONE_KEY");
            assert!(
                !refused.to_string().contains(bad),
                "the value is not echoed"
            );
        }
        assert!(!format!("{own:?}").contains(&own.to_base64()));
    }
}
