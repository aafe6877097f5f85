//! Ed25519 key material from the environment, and the clearly marked development keys
//! used when none is configured.

use base64::{
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
    Engine,
};
use ed25519_dalek::{SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

/// Which development key pair. Each role has its own, so a buyer token can never be a
/// service credential and a token key can never sign a pass.
#[derive(Debug, Clone, Copy)]
pub enum DevKey {
    BuyerTokens,
    ServiceTokens,
    Passes,
}

impl DevKey {
    /// DEVELOPMENT ONLY: a key derived from a public, fixed string. Anyone can mint
    /// tokens with it; production must configure its own keys.
    pub fn signing_key(self) -> SigningKey {
        let label = match self {
            DevKey::BuyerTokens => "paysaga DEVELOPMENT ONLY buyer-token key",
            DevKey::ServiceTokens => "paysaga DEVELOPMENT ONLY service-token key",
            DevKey::Passes => "paysaga DEVELOPMENT ONLY gate-pass key",
        };
        let seed: [u8; 32] = Sha256::digest(label.as_bytes()).into();
        SigningKey::from_bytes(&seed)
    }
    pub fn verifying_key(self) -> VerifyingKey {
        self.signing_key().verifying_key()
    }
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

pub fn encode_verifying_key(k: &VerifyingKey) -> String {
    STANDARD.encode(k.as_bytes())
}

pub fn encode_signing_key(k: &SigningKey) -> String {
    STANDARD.encode(k.to_bytes())
}

/// A verifying key from `var`, or the development key when the variable is unset.
pub fn verifying_key_from_env(
    var: &str,
    dev: DevKey,
) -> Result<VerifyingKey, crate::config::ConfigError> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => {
            parse_verifying_key(&v).map_err(|e| crate::config::ConfigError {
                name: var.to_owned(),
                value: "<redacted>".to_owned(),
                reason: e.to_string(),
            })
        }
        _ => Ok(dev.verifying_key()),
    }
}

/// A signing key from `var`, or the development key when the variable is unset.
pub fn signing_key_from_env(
    var: &str,
    dev: DevKey,
) -> Result<SigningKey, crate::config::ConfigError> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => {
            parse_signing_key(&v).map_err(|e| crate::config::ConfigError {
                name: var.to_owned(),
                value: "<redacted>".to_owned(),
                reason: e.to_string(),
            })
        }
        _ => Ok(dev.signing_key()),
    }
}
