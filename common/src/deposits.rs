//! Deposit authorizations: money paid into a member account from outside (a top-up) is
//! carried out only with the orchestrator's signed word that the staff people it names
//! asked for it and, above the configured amount, that a second person approved it.
//!
//! The orchestrator signs a [`DepositAuthorization`] (Ed25519, with the key of its own
//! service credentials, naming it by `kid`) for one deposit: the member, the amount,
//! the operation key, who asked and who approved. It lives
//! [`DEPOSIT_AUTHORIZATION_LIFETIME_SECS`] (60 s). The member service forwards it as it
//! is; the account service checks it with [`DepositVerifier`] (the orchestrator's
//! registered keys only; signature, audience, expiry, and that it names this very
//! deposit) and refuses a deposit without a valid one. The audience
//! [`DEPOSIT_AUDIENCE`] is no service's, so an authorization is never a service
//! credential, nor a service credential an authorization.

use std::{collections::HashMap, time::Duration};

use ed25519_dalek::SigningKey;
use jsonwebtoken::{DecodingKey, Validation};
use serde::{Deserialize, Serialize};

use crate::{
    auth::{decoding_key, Minter, ServiceRole, ISSUER},
    credentials::ServiceKeys,
    keys::DevKey,
};

/// The audience of every deposit authorization (and of nothing else).
pub const DEPOSIT_AUDIENCE: &str = "paysaga:deposit";

/// How long an authorization lives: the orchestrator signs a fresh one for every
/// attempt, so it never needs to outlive one call through the member service.
pub const DEPOSIT_AUTHORIZATION_LIFETIME_SECS: i64 = 60;

/// What an authorization grants: one deposit, as the people it names asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepositGrant {
    /// The member whose account receives the money.
    pub member_id: String,
    /// Minor units, as the deposit must carry them.
    pub amount: i64,
    /// The deposit's operation key.
    pub operation_key: String,
    /// The staff person who asked (their email as the audit trail names them).
    pub requested_by: String,
    /// The second person who approved it (above the approval limit only).
    pub approved_by: Option<String>,
}

/// The signed claims (a JWT, EdDSA, `kid` in its header).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct DepositClaims {
    sub: String,
    aud: String,
    iss: String,
    iat: i64,
    nbf: i64,
    exp: i64,
    amount: i64,
    operation_key: String,
    requested_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    approved_by: Option<String>,
}

/// A signed deposit authorization, as it travels (`authorization` of a top-up and of a
/// deposit).
pub type DepositAuthorization = String;

/// Signs deposit authorizations with the orchestrator's service key.
pub struct DepositSigner {
    minter: Minter,
}

impl std::fmt::Debug for DepositSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DepositSigner")
            .field("kid", &self.minter.kid())
            .finish_non_exhaustive()
    }
}

impl DepositSigner {
    /// Signs with `key` (the orchestrator's `SERVICE_SIGNING_KEY`), naming it by `kid`.
    pub fn new(key: &SigningKey) -> Self {
        Self {
            minter: Minter::with_kid(key, DEPOSIT_AUDIENCE),
        }
    }

    /// DEVELOPMENT ONLY: the orchestrator's public development key (tests, and seeding
    /// a development system).
    pub fn development() -> Self {
        Self::new(&DevKey::Service(ServiceRole::Orchestrator).signing_key())
    }

    /// An authorization of `grant`, valid from now for
    /// [`DEPOSIT_AUTHORIZATION_LIFETIME_SECS`].
    pub fn sign(&self, grant: &DepositGrant) -> DepositAuthorization {
        let now = chrono::Utc::now().timestamp();
        self.sign_at(grant, now, DEPOSIT_AUTHORIZATION_LIFETIME_SECS)
    }

    /// An authorization of `grant` issued at `iat` (unix seconds), living `lifetime`
    /// seconds (tests of what the verifier refuses use other values).
    pub fn sign_at(&self, grant: &DepositGrant, iat: i64, lifetime: i64) -> DepositAuthorization {
        self.minter.sign(&DepositClaims {
            sub: grant.member_id.clone(),
            aud: DEPOSIT_AUDIENCE.to_owned(),
            iss: ISSUER.to_owned(),
            iat,
            nbf: iat,
            exp: iat + lifetime,
            amount: grant.amount,
            operation_key: grant.operation_key.clone(),
            requested_by: grant.requested_by.clone(),
            approved_by: grant.approved_by.clone(),
        })
    }
}

/// Why a deposit is refused its authorization (the account service answers each 403
/// `DEPOSIT_NOT_APPROVED`, naming the reason in the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DepositRefusal {
    #[error("the deposit carries no authorization")]
    Missing,
    #[error("the authorization is not signed by the orchestrator, or does not parse")]
    Unsigned,
    #[error("the authorization has expired, or is not valid yet")]
    Expired,
    #[error("the authorization lives longer than {DEPOSIT_AUTHORIZATION_LIFETIME_SECS} s")]
    TooLong,
    #[error("the authorization names another {0}")]
    Mismatch(&'static str),
}

/// Checks deposit authorizations against the orchestrator's registered keys.
#[derive(Clone)]
pub struct DepositVerifier {
    keys: HashMap<String, DecodingKey>,
    validation: Validation,
}

impl std::fmt::Debug for DepositVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kids: Vec<&String> = self.keys.keys().collect();
        kids.sort();
        f.debug_tuple("DepositVerifier").field(&kids).finish()
    }
}

impl DepositVerifier {
    /// The orchestrator's keys of `keys` (`SERVICE_KEYS`): no other role's key signs a
    /// deposit.
    pub fn new(keys: &ServiceKeys) -> Self {
        let keys = keys
            .iter()
            .filter(|(_, role, _)| *role == ServiceRole::Orchestrator)
            .map(|(kid, _, key)| (kid.to_owned(), decoding_key(key)))
            .collect();
        let mut validation = Validation::new(jsonwebtoken::Algorithm::EdDSA);
        validation.set_audience(&[DEPOSIT_AUDIENCE]);
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "nbf", "iat", "sub", "aud", "iss"]);
        validation.validate_nbf = true;
        validation.leeway = 2;
        Self { keys, validation }
    }

    /// The grant `authorization` makes, if the orchestrator signed it, it is within its
    /// lifetime, and it names `member_id`, `amount` and `operation_key`.
    pub fn verify(
        &self,
        authorization: Option<&str>,
        member_id: &str,
        amount: i64,
        operation_key: &str,
    ) -> Result<DepositGrant, DepositRefusal> {
        let token = authorization.ok_or(DepositRefusal::Missing)?;
        let kid = jsonwebtoken::decode_header(token)
            .ok()
            .and_then(|h| h.kid)
            .ok_or(DepositRefusal::Unsigned)?;
        let key = self.keys.get(&kid).ok_or(DepositRefusal::Unsigned)?;
        let claims = jsonwebtoken::decode::<DepositClaims>(token, key, &self.validation)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature
                | jsonwebtoken::errors::ErrorKind::ImmatureSignature => DepositRefusal::Expired,
                _ => DepositRefusal::Unsigned,
            })?
            .claims;
        if claims.exp.saturating_sub(claims.iat) > DEPOSIT_AUTHORIZATION_LIFETIME_SECS {
            return Err(DepositRefusal::TooLong);
        }
        if claims.sub != member_id {
            return Err(DepositRefusal::Mismatch("member"));
        }
        if claims.amount != amount {
            return Err(DepositRefusal::Mismatch("amount"));
        }
        if claims.operation_key != operation_key {
            return Err(DepositRefusal::Mismatch("operation key"));
        }
        Ok(DepositGrant {
            member_id: claims.sub,
            amount: claims.amount,
            operation_key: claims.operation_key,
            requested_by: claims.requested_by,
            approved_by: claims.approved_by,
        })
    }

    /// The lifetime every authorization has.
    pub fn lifetime() -> Duration {
        Duration::from_secs(DEPOSIT_AUTHORIZATION_LIFETIME_SECS as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> DepositGrant {
        DepositGrant {
            member_id: "m-1".into(),
            amount: 500,
            operation_key: "topup:1".into(),
            requested_by: "a@example.com".into(),
            approved_by: Some("b@example.com".into()),
        }
    }

    fn verifier() -> DepositVerifier {
        DepositVerifier::new(&ServiceKeys::development())
    }

    #[test]
    fn a_signed_authorization_verifies_for_its_deposit_only() {
        let token = DepositSigner::development().sign(&grant());
        let v = verifier();
        assert_eq!(v.verify(Some(&token), "m-1", 500, "topup:1"), Ok(grant()));
        assert_eq!(
            v.verify(Some(&token), "m-2", 500, "topup:1"),
            Err(DepositRefusal::Mismatch("member"))
        );
        assert_eq!(
            v.verify(Some(&token), "m-1", 501, "topup:1"),
            Err(DepositRefusal::Mismatch("amount"))
        );
        assert_eq!(
            v.verify(Some(&token), "m-1", 500, "topup:2"),
            Err(DepositRefusal::Mismatch("operation key"))
        );
        assert_eq!(
            v.verify(None, "m-1", 500, "topup:1"),
            Err(DepositRefusal::Missing)
        );
    }

    #[test]
    fn another_roles_key_an_expired_or_long_lived_one_is_refused() {
        let v = verifier();
        let gate = DepositSigner::new(&DevKey::Service(ServiceRole::Gate).signing_key());
        assert_eq!(
            v.verify(Some(&gate.sign(&grant())), "m-1", 500, "topup:1"),
            Err(DepositRefusal::Unsigned)
        );
        let now = chrono::Utc::now().timestamp();
        let signer = DepositSigner::development();
        assert_eq!(
            v.verify(
                Some(&signer.sign_at(&grant(), now - 120, 60)),
                "m-1",
                500,
                "topup:1"
            ),
            Err(DepositRefusal::Expired)
        );
        assert_eq!(
            v.verify(
                Some(&signer.sign_at(&grant(), now, 3600)),
                "m-1",
                500,
                "topup:1"
            ),
            Err(DepositRefusal::TooLong)
        );
        assert_eq!(
            v.verify(Some("not-a-token"), "m-1", 500, "topup:1"),
            Err(DepositRefusal::Unsigned)
        );
        // A service credential of the orchestrator is no authorization.
        let credential =
            Minter::dev_service(ServiceRole::Orchestrator, crate::auth::Audience::Account)
                .mint("orchestrator", Duration::from_secs(60));
        assert_eq!(
            v.verify(Some(&credential), "m-1", 500, "topup:1"),
            Err(DepositRefusal::Unsigned)
        );
    }
}
