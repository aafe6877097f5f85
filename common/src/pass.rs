//! The gate pass: a short signed statement "member M may reserve one unit of product P
//! until T". The gate signs with its Ed25519 private key; the order service verifies
//! with the public key alone, so it can never mint passes.
//!
//! Wire form: `v1.<base64url(json claims)>.<base64url(signature over "v1.<claims>")>`.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

const PREFIX: &str = "v1.";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassClaims {
    /// Pass id: single-use, unique among reservations.
    pub pid: Uuid,
    /// Product id.
    pub prd: i64,
    /// Member id.
    pub mem: String,
    /// Expiry, unix seconds.
    pub exp: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PassError {
    #[error("pass is malformed")]
    Malformed,
    #[error("pass signature is invalid")]
    BadSignature,
    #[error("pass has expired")]
    Expired,
}

impl PassError {
    /// The stable error code a service answers with.
    pub fn code(self) -> &'static str {
        match self {
            PassError::Malformed => "PASS_MALFORMED",
            PassError::BadSignature => "PASS_INVALID_SIGNATURE",
            PassError::Expired => "PASS_EXPIRED",
        }
    }
}

pub struct PassSigner {
    key: SigningKey,
}

impl PassSigner {
    pub fn new(key: SigningKey) -> Self {
        Self { key }
    }
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }
    pub fn sign(&self, claims: &PassClaims) -> String {
        let json = serde_json::to_vec(claims).expect("pass claims always serialise");
        let mut token = String::with_capacity(160);
        token.push_str(PREFIX);
        URL_SAFE_NO_PAD.encode_string(json, &mut token);
        let sig = self.key.sign(token.as_bytes());
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(sig.to_bytes(), &mut token);
        token
    }
}

#[derive(Clone)]
pub struct PassVerifier {
    key: VerifyingKey,
}

impl PassVerifier {
    pub fn new(key: VerifyingKey) -> Self {
        Self { key }
    }

    /// Checks signature and expiry against `now` (unix seconds). Product and member
    /// binding are the caller's to check, since only it knows what was asked for.
    pub fn verify(&self, token: &str, now: i64) -> Result<PassClaims, PassError> {
        let body = token.strip_prefix(PREFIX).ok_or(PassError::Malformed)?;
        let (claims_b64, sig_b64) = body.split_once('.').ok_or(PassError::Malformed)?;
        let signed = &token[..PREFIX.len() + claims_b64.len()];
        let sig_bytes: [u8; 64] = URL_SAFE_NO_PAD
            .decode(sig_b64)
            .map_err(|_| PassError::Malformed)?
            .try_into()
            .map_err(|_| PassError::Malformed)?;
        self.key
            .verify_strict(signed.as_bytes(), &Signature::from_bytes(&sig_bytes))
            .map_err(|_| PassError::BadSignature)?;
        let json = URL_SAFE_NO_PAD
            .decode(claims_b64)
            .map_err(|_| PassError::Malformed)?;
        let claims: PassClaims = serde_json::from_slice(&json).map_err(|_| PassError::Malformed)?;
        if claims.exp <= now {
            return Err(PassError::Expired);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::DevKey;

    fn claims(exp: i64) -> PassClaims {
        PassClaims {
            pid: Uuid::new_v4(),
            prd: 7,
            mem: "member-1".into(),
            exp,
        }
    }

    #[test]
    fn round_trip() {
        let signer = PassSigner::new(DevKey::Passes.signing_key());
        let verifier = PassVerifier::new(signer.verifying_key());
        let c = claims(2_000);
        assert_eq!(verifier.verify(&signer.sign(&c), 1_000), Ok(c));
    }

    #[test]
    fn expired_forged_and_tampered_fail() {
        let signer = PassSigner::new(DevKey::Passes.signing_key());
        let verifier = PassVerifier::new(signer.verifying_key());
        let token = signer.sign(&claims(2_000));
        assert_eq!(verifier.verify(&token, 2_000), Err(PassError::Expired));

        let forger = PassSigner::new(DevKey::BuyerTokens.signing_key());
        assert_eq!(
            verifier.verify(&forger.sign(&claims(2_000)), 1_000),
            Err(PassError::BadSignature)
        );

        // Swap in other claims under the original signature.
        let (_, sig) = token.rsplit_once('.').unwrap();
        let other = signer.sign(&PassClaims {
            prd: 8,
            ..claims(2_000)
        });
        let (other_body, _) = other.rsplit_once('.').unwrap();
        assert_eq!(
            verifier.verify(&format!("{other_body}.{sig}"), 1_000),
            Err(PassError::BadSignature)
        );

        assert_eq!(verifier.verify("garbage", 1_000), Err(PassError::Malformed));
        assert_eq!(verifier.verify("v1.abc", 1_000), Err(PassError::Malformed));
    }
}
