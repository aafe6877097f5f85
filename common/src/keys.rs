//! Ed25519 key material from the environment, and the clearly marked development keys,
//! used for an unset key only in development mode (`PAYSAGA_DEV_KEYS=1`) and refused
//! whenever configured explicitly.

use base64::{
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
    Engine,
};
use ed25519_dalek::{SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::{
    auth::ServiceRole,
    config::{ConfigError, Secrets},
};

/// Which development key pair. Each use has its own, and each service role its own
/// credential key, so a buyer token can never be a service credential, a token key can
/// never sign a pass, and even in development one role cannot sign for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevKey {
    BuyerTokens,
    Passes,
    /// The member service's email-verification tokens.
    EmailVerification,
    /// The key a caller of this role signs its own service credentials with.
    Service(ServiceRole),
}

/// The label of the single service-credential key every caller once shared. Nothing
/// signs with it any more; it stays recognised so it can never be configured.
const RETIRED_SHARED_SERVICE_LABEL: &str = "paysaga DEVELOPMENT ONLY service-token key";

impl DevKey {
    pub const ALL: [DevKey; 9] = [
        DevKey::BuyerTokens,
        DevKey::Passes,
        DevKey::EmailVerification,
        DevKey::Service(ServiceRole::Gate),
        DevKey::Service(ServiceRole::Orchestrator),
        DevKey::Service(ServiceRole::Member),
        DevKey::Service(ServiceRole::Operator),
        DevKey::Service(ServiceRole::Order),
        DevKey::Service(ServiceRole::Console),
    ];

    /// DEVELOPMENT ONLY: a key derived from a public, fixed string. Anyone can mint
    /// tokens with it; production must configure its own keys.
    pub fn signing_key(self) -> SigningKey {
        let label = match self {
            DevKey::BuyerTokens => "paysaga DEVELOPMENT ONLY buyer-token key",
            DevKey::Passes => "paysaga DEVELOPMENT ONLY gate-pass key",
            DevKey::EmailVerification => "paysaga DEVELOPMENT ONLY email-verification key",
            DevKey::Service(ServiceRole::Gate) => "paysaga DEVELOPMENT ONLY gate credential key",
            DevKey::Service(ServiceRole::Orchestrator) => {
                "paysaga DEVELOPMENT ONLY orchestrator credential key"
            }
            DevKey::Service(ServiceRole::Member) => {
                "paysaga DEVELOPMENT ONLY member credential key"
            }
            DevKey::Service(ServiceRole::Operator) => {
                "paysaga DEVELOPMENT ONLY operator credential key"
            }
            DevKey::Service(ServiceRole::Order) => "paysaga DEVELOPMENT ONLY order credential key",
            DevKey::Service(ServiceRole::Console) => {
                "paysaga DEVELOPMENT ONLY console credential key"
            }
        };
        seeded(label)
    }
    pub fn verifying_key(self) -> VerifyingKey {
        self.signing_key().verifying_key()
    }
}

fn seeded(label: &str) -> SigningKey {
    let seed: [u8; 32] = Sha256::digest(label.as_bytes()).into();
    SigningKey::from_bytes(&seed)
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("key is not valid base64")]
    Base64,
    #[error("key must be 32 bytes, got {0}")]
    Length(usize),
    #[error("not a valid Ed25519 public key")]
    Invalid,
}

fn decode32(s: &str) -> Result<[u8; 32], KeyError> {
    let s = s.trim();
    let bytes = STANDARD
        .decode(s)
        .or_else(|_| URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')))
        .map_err(|_| KeyError::Base64)?;
    let len = bytes.len();
    bytes.try_into().map_err(|_| KeyError::Length(len))
}

/// A public key given as base64 of its 32 raw bytes.
pub fn parse_verifying_key(s: &str) -> Result<VerifyingKey, KeyError> {
    VerifyingKey::from_bytes(&decode32(s)?).map_err(|_| KeyError::Invalid)
}

/// A private key given as base64 of its 32-byte seed.
pub fn parse_signing_key(s: &str) -> Result<SigningKey, KeyError> {
    Ok(SigningKey::from_bytes(&decode32(s)?))
}

/// A fresh key from the operating system's random source.
pub fn generate_signing_key() -> SigningKey {
    use rand::RngCore;
    let mut seed = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut seed);
    SigningKey::from_bytes(&seed)
}

pub fn encode_verifying_key(k: &VerifyingKey) -> String {
    STANDARD.encode(k.as_bytes())
}

pub fn encode_signing_key(k: &SigningKey) -> String {
    STANDARD.encode(k.to_bytes())
}

/// Whether `key` is the public half of any development key pair. Anyone can sign for
/// those, so a configured key never may be one, in any mode.
pub fn is_development_key(key: &VerifyingKey) -> bool {
    DevKey::ALL.iter().any(|d| d.verifying_key() == *key)
        || seeded(RETIRED_SHARED_SERVICE_LABEL).verifying_key() == *key
}

pub(crate) fn invalid(var: &str, reason: String) -> ConfigError {
    ConfigError {
        name: var.to_owned(),
        value: "<redacted>".to_owned(),
        reason,
    }
}

pub(crate) fn refuse_development(var: &str, key: &VerifyingKey) -> Result<(), ConfigError> {
    if is_development_key(key) {
        return Err(invalid(
            var,
            "is a public DEVELOPMENT key (anyone can sign with it); configure a key of your own"
                .to_owned(),
        ));
    }
    Ok(())
}

/// A configured value of `var`, if set and not blank.
pub(crate) fn configured(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// A verifying key from `var`. Unset, it is `dev`'s key in development mode and missing
/// otherwise (see [`Secrets`]); set to a development key, it is refused.
pub fn verifying_key(
    secrets: &mut Secrets,
    var: &str,
    dev: DevKey,
) -> Result<VerifyingKey, ConfigError> {
    let parse = |v: &str| parse_verifying_key(v).map(|k| (k, k));
    key_from_env(secrets, var, parse, || dev.verifying_key())
}

/// A signing key from `var`, with the rules of [`verifying_key`].
pub fn signing_key(
    secrets: &mut Secrets,
    var: &str,
    dev: DevKey,
) -> Result<SigningKey, ConfigError> {
    let parse = |v: &str| parse_signing_key(v).map(|k| (k.verifying_key(), k));
    key_from_env(secrets, var, parse, || dev.signing_key())
}

/// The key `parse` makes of `var` (with its public half, which must be no development
/// key), or `dev()` in its place when `var` is unset, recorded in `secrets`.
fn key_from_env<K>(
    secrets: &mut Secrets,
    var: &str,
    parse: impl FnOnce(&str) -> Result<(VerifyingKey, K), KeyError>,
    dev: impl FnOnce() -> K,
) -> Result<K, ConfigError> {
    let Some(v) = configured(var) else {
        secrets.unset(var);
        return Ok(dev());
    };
    let (public, key) = parse(&v).map_err(|e| invalid(var, e.to_string()))?;
    refuse_development(var, &public)?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn development_keys_are_recognised_and_fresh_ones_are_not() {
        let fresh = generate_signing_key;
        for d in DevKey::ALL {
            assert!(is_development_key(&d.verifying_key()));
            assert!(refuse_development("PASS_PUBLIC_KEY", &d.verifying_key())
                .unwrap_err()
                .to_string()
                .contains("PASS_PUBLIC_KEY"));
        }
        assert!(is_development_key(
            &seeded(RETIRED_SHARED_SERVICE_LABEL).verifying_key()
        ));
        assert!(!is_development_key(&fresh().verifying_key()));
        let distinct: std::collections::HashSet<_> = DevKey::ALL
            .iter()
            .map(|d| d.verifying_key().to_bytes())
            .collect();
        assert_eq!(
            distinct.len(),
            DevKey::ALL.len(),
            "one key per use and role"
        );
        assert!(refuse_development("PASS_PUBLIC_KEY", &fresh().verifying_key()).is_ok());
    }

    #[test]
    fn keys_round_trip_through_their_encoding() {
        let k = generate_signing_key();
        let parsed = parse_signing_key(&encode_signing_key(&k)).unwrap();
        assert_eq!(parsed.to_bytes(), k.to_bytes());
        let v = parse_verifying_key(&encode_verifying_key(&k.verifying_key())).unwrap();
        assert_eq!(v, k.verifying_key());
        assert!(matches!(
            parse_verifying_key("AAAA"),
            Err(KeyError::Length(3))
        ));
    }
}
