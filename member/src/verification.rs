//! Email verification: the signed, expiring token a sign-up's
//! `member.verification_requested` event carries (written to the outbox in the sign-up's
//! transaction), and `POST /v1/members/verification`, which checks it and marks the
//! member's email verified. A token is an EdDSA JWT under a key of its own and an
//! audience of its own, so it is no buyer token and no buyer token is one; it names the
//! member and the email, and proves nothing else.

use std::time::Duration;

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use chrono::{DateTime, Utc};
use ed25519_dalek::SigningKey;
use jsonwebtoken::{errors::ErrorKind, Algorithm, DecodingKey, Validation};
use paysaga_common::auth::{Minter, ISSUER};
use paysaga_contracts::member::api::{events, Member, MemberVerificationRequested};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    error::{Error, Result},
    members::{self, MemberRow},
    AppState,
};

/// The `aud` of every verification token.
pub const VERIFICATION_AUDIENCE: &str = "paysaga:email-verification";

/// Longer than any token this service signs: refused before it is parsed.
const MAX_TOKEN_LEN: usize = 4096;

#[derive(Debug, Serialize, Deserialize)]
struct VerificationClaims {
    /// The member id.
    sub: String,
    /// The email the token verifies: a member whose email changed is not verified by
    /// an old token.
    email: String,
    aud: String,
    iss: String,
    iat: i64,
    nbf: i64,
    exp: i64,
}

/// Why a token does not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Signed here, for this purpose, but past its expiry.
    Expired,
    /// Anything else: garbled, signed by another key, another kind of token.
    Invalid,
}

/// Signs and checks verification tokens.
pub struct VerificationKeys {
    minter: Minter,
    key: DecodingKey,
    validation: Validation,
}

impl VerificationKeys {
    pub fn new(key: &SigningKey) -> Self {
        let public = URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes());
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.set_audience(&[VERIFICATION_AUDIENCE]);
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "nbf", "sub", "aud", "iss"]);
        validation.validate_nbf = true;
        // An expiry is the expiry: a day's token needs no clock leeway.
        validation.leeway = 0;
        Self {
            minter: Minter::new(key, VERIFICATION_AUDIENCE),
            key: DecodingKey::from_ed_components(&public)
                .expect("a 32-byte Ed25519 key always encodes"),
            validation,
        }
    }

    /// A token verifying `email` of `member`, issued at `issued_at` and good for `ttl`;
    /// with its expiry.
    pub fn mint(
        &self,
        member: Uuid,
        email: &str,
        issued_at: DateTime<Utc>,
        ttl: Duration,
    ) -> (String, DateTime<Utc>) {
        let iat = issued_at.timestamp();
        let exp = iat.saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX));
        let claims = VerificationClaims {
            sub: member.to_string(),
            email: email.to_owned(),
            aud: VERIFICATION_AUDIENCE.to_owned(),
            iss: ISSUER.to_owned(),
            iat,
            nbf: iat,
            exp,
        };
        let expires_at = DateTime::from_timestamp(exp, 0).unwrap_or(DateTime::<Utc>::MAX_UTC);
        (self.minter.sign(&claims), expires_at)
    }

    /// The member and email a token of this service's names, if it is good now.
    pub fn check(&self, token: &str) -> Result<(Uuid, String), Refused> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(Refused::Invalid);
        }
        let claims = jsonwebtoken::decode::<VerificationClaims>(token, &self.key, &self.validation)
            .map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => Refused::Expired,
                _ => Refused::Invalid,
            })?
            .claims;
        let member = Uuid::parse_str(&claims.sub).map_err(|_| Refused::Invalid)?;
        Ok((member, claims.email))
    }
}

/// Writes `member.verification_requested` for a member just inserted, on `tx`: it
/// commits with the member or not at all.
pub(crate) async fn request(
    tx: &mut PgConnection,
    state: &AppState,
    row: &MemberRow,
) -> Result<()> {
    let (token, expires_at) = state.verification.mint(
        row.id,
        &row.email,
        Utc::now(),
        state.config.verification_ttl,
    );
    let data = MemberVerificationRequested {
        member_id: row.id.to_string(),
        email: row.email.clone(),
        token,
        expires_at,
    };
    let data = serde_json::to_value(&data)
        .map_err(|e| Error::Internal(format!("verification event data: {e}")))?;
    sqlx::query(
        r#"INSERT INTO outbox_events (id, type, subject, data)
           VALUES ($1, $2, $3, $4)"#,
    )
    .bind(Uuid::now_v7())
    .bind(events::VERIFICATION_REQUESTED)
    .bind(row.id.to_string())
    .bind(data)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// `POST /v1/members/verification`: the token checked first (a refused one changes
/// nothing), then the member's email marked verified, once; a token used again answers
/// the same member.
#[tracing::instrument(skip_all)]
pub(crate) async fn verify_email(state: &AppState, token: &str) -> Result<Member> {
    let (member, email) = state.verification.check(token).map_err(|why| {
        metrics::counter!("member_email_verifications_total", "outcome" => match why {
            Refused::Expired => "expired",
            Refused::Invalid => "invalid",
        })
        .increment(1);
        match why {
            Refused::Expired => Error::TokenExpired,
            Refused::Invalid => Error::InvalidToken,
        }
    })?;
    // The email is matched too: the token verifies the address it was sent to.
    let row: Option<MemberRow> = sqlx::query_as(&format!(
        r#"UPDATE members SET email_verified_at = COALESCE(email_verified_at, now())
           WHERE id = $1 AND email = $2
           RETURNING {}"#,
        members::COLUMNS
    ))
    .bind(member)
    .bind(&email)
    .fetch_optional(&state.pool)
    .await?;
    let row = row.ok_or(Error::InvalidToken)?;
    tracing::info!(%member, "email verified");
    metrics::counter!("member_email_verifications_total", "outcome" => "verified").increment(1);
    Ok(row.into())
}

#[cfg(test)]
mod tests {
    use paysaga_common::keys::DevKey;

    use super::*;

    #[test]
    fn a_token_verifies_its_member_until_it_expires_and_nothing_else_does() {
        let keys = VerificationKeys::new(&DevKey::EmailVerification.signing_key());
        let member = Uuid::now_v7();
        let day = Duration::from_secs(86_400);
        let (token, expires_at) = keys.mint(member, "ada@example.com", Utc::now(), day);
        assert!(expires_at > Utc::now());
        assert_eq!(
            keys.check(&token),
            Ok((member, "ada@example.com".to_owned()))
        );
        let two_days_ago = Utc::now() - chrono::Duration::days(2);
        let (old, _) = keys.mint(member, "ada@example.com", two_days_ago, day);
        assert_eq!(keys.check(&old), Err(Refused::Expired));
        let other = VerificationKeys::new(&DevKey::BuyerTokens.signing_key());
        let (forged, _) = other.mint(member, "ada@example.com", Utc::now(), day);
        assert_eq!(keys.check(&forged), Err(Refused::Invalid));
        let buyer = Minter::dev_buyer().mint(&member.to_string(), day);
        let buyer_keys = VerificationKeys::new(&DevKey::BuyerTokens.signing_key());
        assert_eq!(
            buyer_keys.check(&buyer),
            Err(Refused::Invalid),
            "no buyer token"
        );
        for garbled in [
            "",
            "x",
            "a.b.c",
            &token[..token.len() - 2],
            &"y".repeat(5000),
        ] {
            assert_eq!(keys.check(garbled), Err(Refused::Invalid), "{garbled:.20}");
        }
    }
}
