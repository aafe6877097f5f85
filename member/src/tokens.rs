//! Buyer tokens this service signs and publishes, and the refresh tokens it hands out.

use std::collections::HashMap;

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use jsonwebtoken::{DecodingKey, Validation};
use paysaga_common::{
    auth::{buyer_validation, within_buyer_lifetime, Claims, Minter, BUYER_AUDIENCE},
    jwks::{kid_of, JwkSet},
};
use rand::RngCore;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::config::SigningKeys;

/// The member service's buyer-token keys: the current one signs, every one verifies
/// and is published.
pub struct TokenKeys {
    minter: Minter,
    by_kid: HashMap<String, DecodingKey>,
    jwks: JwkSet,
    validation: Validation,
}

impl TokenKeys {
    pub fn new(keys: &SigningKeys) -> Self {
        let public: Vec<_> = keys.all().iter().map(|k| k.verifying_key()).collect();
        let by_kid = public
            .iter()
            .map(|k| {
                let key = DecodingKey::from_ed_components(&URL_SAFE_NO_PAD.encode(k.as_bytes()))
                    .expect("a 32-byte Ed25519 key always encodes");
                (kid_of(k), key)
            })
            .collect();
        Self {
            minter: Minter::with_kid(keys.current(), BUYER_AUDIENCE),
            by_kid,
            jwks: JwkSet::of(&public),
            // The same checks as every other service's (nbf, iat, the lifetime cap).
            validation: buyer_validation(),
        }
    }

    /// A buyer token for `member`, valid for `ttl`, naming the current key by `kid`,
    /// saying whether the member's email is verified (`email_verified`).
    pub fn mint(&self, member: Uuid, email_verified: bool, ttl: std::time::Duration) -> String {
        self.minter
            .mint_buyer(&member.to_string(), email_verified, ttl)
    }

    /// The current key's id.
    pub fn current_kid(&self) -> &str {
        self.minter.kid().unwrap_or_default()
    }

    /// What `/.well-known/jwks.json` serves.
    pub fn jwks(&self) -> &JwkSet {
        &self.jwks
    }

    /// The member a buyer token names, if one of this service's keys (current or
    /// previous) signed it and it is valid now.
    pub fn verify(&self, token: &str) -> Option<Uuid> {
        let kid = jsonwebtoken::decode_header(token).ok()?.kid?;
        let key = self.by_kid.get(&kid)?;
        let data = jsonwebtoken::decode::<Claims>(token, key, &self.validation).ok()?;
        if !within_buyer_lifetime(&data.claims) {
            return None;
        }
        Uuid::parse_str(&data.claims.sub).ok()
    }
}

/// A new refresh token: 32 random bytes, base64url. Only its hash is stored.
pub fn new_refresh_token() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// What is stored of a refresh token: SHA-256 of the string the client holds.
pub fn refresh_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ed25519_dalek::SigningKey;

    use super::*;

    #[test]
    fn tokens_of_every_published_key_verify_and_others_do_not() {
        let old = SigningKey::from_bytes(&[7; 32]);
        let new = SigningKey::from_bytes(&[8; 32]);
        let before = TokenKeys::new(&SigningKeys::new(vec![old.clone()]));
        let after = TokenKeys::new(&SigningKeys::new(vec![new.clone(), old]));
        let member = Uuid::now_v7();
        let old_token = before.mint(member, false, Duration::from_secs(60));
        let new_token = after.mint(member, true, Duration::from_secs(60));
        assert_eq!(after.verify(&old_token), Some(member));
        assert_eq!(after.verify(&new_token), Some(member));
        assert_eq!(before.verify(&new_token), None, "not a key it knows");
        assert_eq!(after.jwks().keys.len(), 2);
        assert_eq!(after.current_kid(), kid_of(&new.verifying_key()));
        let service = Minter::dev_service(
            paysaga_common::auth::ServiceRole::Member,
            paysaga_common::auth::Audience::Member,
        )
        .mint(&member.to_string(), Duration::from_secs(60));
        assert_eq!(after.verify(&service), None);
    }

    #[test]
    fn refresh_tokens_are_random_and_hashed() {
        let a = new_refresh_token();
        assert_eq!(a.len(), 43);
        assert_ne!(a, new_refresh_token());
        assert_eq!(refresh_hash(&a).len(), 32);
    }
}
