//! Buyer authentication with a bounded cache of already-verified tokens. A buyer's
//! retries during a drop carry the same token; verifying its Ed25519 signature once is
//! enough until it expires. Only tokens that passed full verification are cached,
//! keyed by the whole token string, so the cache never accepts anything the verifier
//! would refuse (except that it honours `exp` without the verifier's 5 s leeway).

use std::{
    collections::HashMap,
    hash::{BuildHasher, RandomState},
    sync::{Arc, Mutex},
};

use axum::{
    extract::{FromRef, FromRequestParts},
    http::{header::AUTHORIZATION, request::Parts},
};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use paysaga_common::{
    auth::{MemberId, Verifier},
    ApiError,
};

const SHARDS: usize = 16;

#[derive(Debug, Clone)]
struct Entry {
    member: MemberId,
    exp: i64,
}

/// Verifies buyer tokens exactly as `paysaga_common::auth::Buyer` does, remembering
/// the verified ones.
pub struct BuyerAuth {
    verifier: Arc<Verifier>,
    shards: Vec<Mutex<HashMap<Box<str>, Entry>>>,
    per_shard: usize,
    hasher: RandomState,
}

/// Why a buyer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A valid service credential on a buyer endpoint.
    ServiceCredential,
    Invalid,
}

#[derive(serde::Deserialize)]
struct ExpOnly {
    exp: i64,
}

/// The `exp` claim of a token whose signature was already verified.
fn expiry(token: &str) -> Option<i64> {
    let payload = token.split('.').nth(1)?;
    let json = URL_SAFE_NO_PAD.decode(payload).ok()?;
    serde_json::from_slice::<ExpOnly>(&json).ok().map(|c| c.exp)
}

impl BuyerAuth {
    /// `capacity` verified tokens at most; 0 disables the cache.
    pub fn new(verifier: Arc<Verifier>, capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS);
        Self {
            verifier,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard,
            hasher: RandomState::new(),
        }
    }

    pub fn verifier(&self) -> &Arc<Verifier> {
        &self.verifier
    }

    fn shard(&self, token: &str) -> &Mutex<HashMap<Box<str>, Entry>> {
        let i = self.hasher.hash_one(token) as usize % SHARDS;
        &self.shards[i]
    }

    /// The cached member for `token`, if it was verified and has not expired at `now`.
    fn cached(&self, token: &str, now: i64) -> Option<MemberId> {
        if self.per_shard == 0 {
            return None;
        }
        let shard = self.shard(token).lock().unwrap_or_else(|p| p.into_inner());
        shard
            .get(token)
            .filter(|e| e.exp > now)
            .map(|e| e.member.clone())
    }

    pub fn verify_buyer(&self, token: &str, now: i64) -> Result<MemberId, Refusal> {
        if let Some(member) = self.cached(token, now) {
            return Ok(member);
        }
        let Some(member) = self.verifier.verify_buyer(token) else {
            if self.verifier.verify_service(token).is_some() {
                return Err(Refusal::ServiceCredential);
            }
            return Err(Refusal::Invalid);
        };
        if self.per_shard > 0 {
            if let Some(exp) = expiry(token).filter(|&exp| exp > now) {
                let mut shard = self.shard(token).lock().unwrap_or_else(|p| p.into_inner());
                if shard.len() >= self.per_shard {
                    shard.retain(|_, e| e.exp > now);
                    if shard.len() >= self.per_shard {
                        // Full of live tokens: start the shard over rather than track recency.
                        shard.clear();
                    }
                }
                shard.insert(
                    token.into(),
                    Entry {
                        member: member.clone(),
                        exp,
                    },
                );
            }
        }
        Ok(member)
    }

    pub fn cached_tokens(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }
}

fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let value = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer <token>"))?;
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthorized("Authorization header is not valid text"))?;
    value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::unauthorized("expected Authorization: Bearer <token>"))
}

/// An authenticated buyer, through the cache. Same answers as the common `Buyer`.
#[derive(Debug, Clone)]
pub struct CachedBuyer(pub MemberId);

impl<S> FromRequestParts<S> for CachedBuyer
where
    S: Send + Sync,
    Arc<BuyerAuth>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let auth = Arc::<BuyerAuth>::from_ref(state);
        let token = bearer(parts)?;
        match auth.verify_buyer(token, chrono::Utc::now().timestamp()) {
            Ok(member) => Ok(CachedBuyer(member)),
            Err(Refusal::ServiceCredential) => Err(ApiError::forbidden(
                "this endpoint is for buyers; a service credential cannot act as a member",
            )),
            Err(Refusal::Invalid) => Err(ApiError::unauthorized("invalid or expired token")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paysaga_common::{
        auth::{Minter, BUYER_AUDIENCE},
        keys::DevKey,
    };
    use std::time::Duration;

    fn auth(cap: usize) -> BuyerAuth {
        BuyerAuth::new(Arc::new(Verifier::development()), cap)
    }

    #[test]
    fn caches_only_verified_tokens_and_honours_expiry() {
        let a = auth(100);
        let token = Minter::dev_buyer().mint("member-1", Duration::from_secs(60));
        let now = chrono::Utc::now().timestamp();
        assert_eq!(
            a.verify_buyer(&token, now).map(|m| m.to_string()),
            Ok("member-1".into())
        );
        assert_eq!(a.cached_tokens(), 1);
        assert_eq!(
            a.verify_buyer(&token, now).map(|m| m.to_string()),
            Ok("member-1".into())
        );
        assert!(a.cached(&token, now).is_some());
        assert!(
            a.cached(&token, now + 61).is_none(),
            "past its expiry the cached entry no longer answers"
        );

        let forged = Minter::new(&DevKey::ServiceTokens.signing_key(), BUYER_AUDIENCE)
            .mint("member-1", Duration::from_secs(60));
        assert_eq!(a.verify_buyer(&forged, now), Err(Refusal::Invalid));
        let mut tampered = token.clone();
        tampered.push('x');
        assert_eq!(a.verify_buyer(&tampered, now), Err(Refusal::Invalid));
        let svc = Minter::dev_service().mint("order", Duration::from_secs(60));
        assert_eq!(a.verify_buyer(&svc, now), Err(Refusal::ServiceCredential));
        assert_eq!(a.cached_tokens(), 1, "refused tokens are never cached");
    }

    #[test]
    fn stays_within_capacity() {
        let a = auth(32);
        let now = chrono::Utc::now().timestamp();
        let m = Minter::dev_buyer();
        for i in 0..500 {
            let t = m.mint(&format!("m{i}"), Duration::from_secs(60));
            assert!(a.verify_buyer(&t, now).is_ok());
        }
        assert!(a.cached_tokens() <= 32);
    }
}
