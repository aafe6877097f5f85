//! A request's key and what it is scoped to: the validated `Idempotency-Key`, the
//! request's fingerprint, and what a request under a key does next.

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::error::{Error, Result};

pub const HEADER: &str = "idempotency-key";
pub const REPLAYED_HEADER: &str = "idempotency-replayed";
pub const MAX_KEY_LEN: usize = 255;

/// A validated `Idempotency-Key`: 1-255 visible ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn from_headers(headers: &HeaderMap) -> Result<Self> {
        let mut values = headers.get_all(HEADER).iter();
        let value = values.next().ok_or(Error::IdempotencyKeyMissing)?;
        if values.next().is_some() {
            return Err(Error::IdempotencyKeyInvalid(
                "send exactly one Idempotency-Key header",
            ));
        }
        let s = value
            .to_str()
            .map_err(|_| Error::IdempotencyKeyInvalid("Idempotency-Key must be visible ASCII"))?;
        Self::parse(s)
    }

    pub fn parse(s: &str) -> Result<Self> {
        if s.is_empty() || s.len() > MAX_KEY_LEN {
            return Err(Error::IdempotencyKeyInvalid(
                "Idempotency-Key must be 1-255 characters",
            ));
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::IdempotencyKeyInvalid(
                "Idempotency-Key must be visible ASCII without spaces",
            ));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// sha256 over the operation, the member and the normalised body (the parsed request
/// serialised again: fixed field order, canonical UUID spelling, no whitespace).
pub fn fingerprint(operation: &str, member: &str, normalised_body: &str) -> String {
    let mut h = Sha256::new();
    for part in [operation, member, normalised_body] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Which record: the key is scoped to (member, operation).
#[derive(Debug, Clone)]
pub struct Scope {
    pub member: String,
    pub operation: &'static str,
    pub key: IdempotencyKey,
}

/// What the caller of [`begin`] does next.
#[derive(Debug)]
pub enum Begin {
    /// Execute the request; only `token` may write its result. `payment_id` is set
    /// when a crashed owner already created the payment (execution resumes from it).
    Owned {
        token: Uuid,
        payment_id: Option<Uuid>,
    },
    /// Answer with the stored response.
    Replay { status: u16, body: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded_visible_ascii() {
        assert!(IdempotencyKey::parse("order-123_abc").is_ok());
        assert!(IdempotencyKey::parse("").is_err());
        assert!(IdempotencyKey::parse("has space").is_err());
        assert!(IdempotencyKey::parse("é").is_err());
        assert!(IdempotencyKey::parse(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(IdempotencyKey::parse(&"k".repeat(MAX_KEY_LEN)).is_ok());
    }

    #[test]
    fn fingerprint_separates_its_parts() {
        let a = fingerprint("create_payment", "m1", "{}");
        assert_eq!(a, fingerprint("create_payment", "m1", "{}"));
        assert_ne!(a, fingerprint("create_payment", "m2", "{}"));
        assert_ne!(fingerprint("op", "ab", "c"), fingerprint("op", "a", "bc"));
    }
}
