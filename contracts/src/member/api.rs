//! The member service's wire types, shared by its server and its typed client.

use chrono::{DateTime, Utc};
use paysaga_common::money::Amount;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

pub use crate::account::api::OperationKey;

/// Error codes this service answers with, beside the common ones in
/// `paysaga_common::error::codes`. Stable: callers match on them.
pub mod codes {
    paysaga_common::error_codes! {
        /// A member with this (normalised) email exists already.
        EMAIL_TAKEN,
        /// Not an email address: one `@`, a non-empty local part, a domain with a dot,
        /// at most 254 characters.
        INVALID_EMAIL,
        /// Fewer than 12 characters.
        PASSWORD_TOO_SHORT,
        /// More than 128 characters.
        PASSWORD_TOO_LONG,
        /// The password contains the email's local part (when that has 4 characters or more).
        PASSWORD_CONTAINS_EMAIL,
        /// The password is on the list of common passwords.
        PASSWORD_TOO_COMMON,
        /// The member exists but the account service has not opened its account yet (503
        /// on sign-up: retry it or let the repair job finish; 409 on a top-up).
        ACCOUNT_PENDING,
        /// Unknown email or wrong password: deliberately the same answer.
        INVALID_CREDENTIALS,
        /// Too many failed sign-ins for this email from this address, from this address,
        /// or for this email from an address that has failed for it; see `Retry-After`.
        TOO_MANY_ATTEMPTS,
        /// Too many sign-ups from this address, or from everyone at this moment; see
        /// `Retry-After`. Nothing was looked up or stored.
        TOO_MANY_SIGN_UPS,
        /// The refresh token was already used: its whole family is now revoked.
        REFRESH_TOKEN_REUSED,
        /// Unknown, expired or revoked refresh token.
        INVALID_REFRESH_TOKEN,
        /// No such member.
        MEMBER_NOT_FOUND,
        /// A bulk sign-up carries 1 to [`super::MAX_BULK_MEMBERS`] members.
        BULK_TOO_LARGE,
        /// An opening balance below zero or above the maximum.
        INVALID_OPENING_BALANCE,
        /// The account service could not be reached or gave no definite answer; nothing is
        /// known to have happened. Retrying with the same operation key is safe.
        ACCOUNT_UNAVAILABLE,
        /// An email-verification token past its expiry: nothing was changed. Sign-up's
        /// `member.verification_requested` event carried it; a member with none valid left
        /// has no way to verify yet.
        TOKEN_EXPIRED,
        /// Not an email-verification token this service signed (garbled, forged, another
        /// kind of token, or for a member or email that does not exist): nothing was changed.
        INVALID_TOKEN,
    }
    /// `POST /v1/events/ack` named no event id, or more than 1,000.
    pub const INVALID_EVENT_IDS: &str = crate::outbox::INVALID_EVENT_IDS;
}

/// The most members one bulk sign-up may carry.
pub const MAX_BULK_MEMBERS: usize = 5_000;

/// The `token_type` of every session.
pub const TOKEN_TYPE: &str = "Bearer";

/// `POST /v1/members` (sign-up) and `POST /v1/sessions` (sign-in).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    #[schema(schema_with = crate::schemas::member_email)]
    pub email: String,
    /// The password rules ([`paysaga_common::password::schema`]).
    #[schema(schema_with = paysaga_common::password::schema)]
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("email", &"<redacted>")
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A member. `id` is the stable member id: the `sub` of the member's buyer tokens and
/// the `member_id` of its account. `account_id` is null while the account service has
/// not opened the account yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Member {
    pub id: Uuid,
    #[schema(example = "ada@example.com")]
    pub email: String,
    pub account_id: Option<i64>,
    pub created_at: DateTime<Utc>,
    /// Whether the member proved the email is theirs (`POST /v1/members/verification`);
    /// the member's buyer tokens carry it as `email_verified`.
    #[serde(default)]
    pub email_verified: bool,
}

/// `POST /v1/members/verification`: the token of a `member.verification_requested`
/// event.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyEmail {
    #[schema(max_length = 4096)]
    pub token: String,
}

impl std::fmt::Debug for VerifyEmail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VerifyEmail { token: <redacted> }")
    }
}

/// The event types the member service writes to its outbox (`OutboxEvent::kind`).
pub mod events {
    /// A member signed up; the merchant sends the email with the token. Subject: the
    /// member id. Data: [`super::MemberVerificationRequested`].
    pub const VERIFICATION_REQUESTED: &str = crate::events::types::MEMBER_VERIFICATION_REQUESTED;
}

pub use crate::events::MemberVerificationRequested;

/// A signed-in session: a short-lived buyer token and a refresh token that rotates on
/// every use. Lifetimes in seconds.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Session {
    pub member_id: Uuid,
    pub access_token: String,
    #[schema(example = "Bearer")]
    pub token_type: String,
    #[schema(example = 900)]
    pub expires_in: u64,
    pub refresh_token: String,
    #[schema(example = 2592000)]
    pub refresh_expires_in: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("member_id", &self.member_id)
            .field("access_token", &"<redacted>")
            .field("expires_in", &self.expires_in)
            .field("refresh_token", &"<redacted>")
            .field("refresh_expires_in", &self.refresh_expires_in)
            .finish()
    }
}

/// `POST /v1/sessions/refresh` and `POST /v1/sessions/sign-out`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefreshTokenRequest {
    pub refresh_token: String,
}

impl std::fmt::Debug for RefreshTokenRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RefreshTokenRequest { refresh_token: <redacted> }")
    }
}

/// `GET /v1/members?limit=&after=`: members ordered by id, after `after`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListMembers {
    /// 1 to 1000, default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000)]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// The last id of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Uuid>,
}

/// The most members one page holds.
pub const MAX_PAGE: u32 = 1_000;

/// One page of members; `next_after` is set when more may follow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MemberPage {
    pub members: Vec<Member>,
    pub next_after: Option<Uuid>,
}

/// `POST /v1/members/{id}/top-ups` (the orchestrator only): money paid into the
/// member's account from outside, once per operation key (a deposit in the account
/// service), with the orchestrator's deposit authorization passed on as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TopUpRequest {
    pub operation_key: OperationKey,
    pub amount: Amount,
    /// The orchestrator's signed deposit authorization (`paysaga_common::deposits`);
    /// the account service refuses the deposit without a valid one (403
    /// `DEPOSIT_NOT_APPROVED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<String>,
}

/// One member of a bulk sign-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkMember {
    #[schema(schema_with = crate::schemas::member_email)]
    pub email: String,
}

/// `POST /v1/members/bulk` (seeding only): many members sharing one password, each
/// answered with a signed-in session.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkSignUpRequest {
    #[schema(
        min_length = 12,
        max_length = 128,
        pattern = "^(?!(?:000000000000|111111111111|123123123123|123456789012|1234567890123|12345678901234|123456123456|1[qQ]2[wW]3[eE]4[rR]5[tT]6[yY]|1[qQ][aA][zZ]2[wW][sS][xX]3[eE][dD][cC]|[aA][bB][cC]123456789|[aA][bB][cC][dD][eE][fF][gG][hH][iI][jJ][kK][lL]|[aA][dD][mM][iI][nN][iI][sS][tT][rR][aA][tT][oO][rR]|[aA][sS][dD][fF][gG][hH][jJ][kK][lL]123|[bB][aA][sS][eE][bB][aA][lL][lL]1234|[cC][hH][aA][nN][gG][eE][mM][eE]1234|[cC][oO][rR][rR][eE][cC][tT][hH][oO][rR][sS][eE][bB][aA][tT][tT][eE][rR][yY][sS][tT][aA][pP][lL][eE]|[cC][oO][rR][rR][eE][cC][tT] [hH][oO][rR][sS][eE] [bB][aA][tT][tT][eE][rR][yY] [sS][tT][aA][pP][lL][eE]|[fF][oO][oO][tT][bB][aA][lL][lL]1234|[iI][lL][oO][vV][eE][yY][oO][uU]1234|[lL][eE][tT][mM][eE][iI][nN]12345|[mM][oO][nN][kK][eE][yY]123456|[pP]@[sS][sS][wW]0[rR][dD]1234|[pP][aA][sS][sS][wW]0[rR][dD]1234|[pP][aA][sS][sS][wW][oO][rR][dD]1234|[pP][aA][sS][sS][wW][oO][rR][dD]123\\!|[pP][aA][sS][sS][wW][oO][rR][dD]12345|[pP][aA][sS][sS][wW][oO][rR][dD][pP][aA][sS][sS][wW][oO][rR][dD]|[pP][rR][iI][nN][cC][eE][sS][sS]1234|[qQ][wW][eE][rR][tT][yY]123456|[qQ][wW][eE][rR][tT][yY][uU][iI][oO][pP]12|[qQ][wW][eE][rR][tT][yY][uU][iI][oO][pP]123|[qQ][wW][eE][rR][tT][yY][uU][iI][oO][pP][aA][sS][dD][fF]|[sS][uU][nN][sS][hH][iI][nN][eE]1234|[tT][rR][uU][sS][tT][nN][oO]1[tT][rR][uU][sS][tT][nN][oO]1|[wW][eE][lL][cC][oO][mM][eE]12345|[zZ][aA][qQ]12[wW][sS][xX][cC][dD][eE]3)$)"
    )]
    pub password: String,
    #[schema(min_items = 1, max_items = 5000)]
    pub members: Vec<BulkMember>,
    /// Each new member's opening balance (minor units), default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub opening_balance: Option<i64>,
}

impl std::fmt::Debug for BulkSignUpRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkSignUpRequest")
            .field("password", &"<redacted>")
            .field("members", &self.members.len())
            .field("opening_balance", &self.opening_balance)
            .finish()
    }
}

/// One member of a bulk sign-up's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BulkSignedUp {
    pub member: Member,
    pub session: Session,
}

/// The answer to a bulk sign-up, in the order of the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BulkSignUpResponse {
    pub members: Vec<BulkSignedUp>,
}

/// The member service's account-opening key for a member: the same for every attempt,
/// so the account service opens one account per member however often it is asked.
pub fn account_open_key(member: Uuid) -> OperationKey {
    OperationKey::parse(format!("member:{member}:account"))
        .expect("a UUID key is always a valid operation key")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let c = Credentials {
            email: "ada@example.com".into(),
            password: "hunter2hunter2".into(),
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("ada@"));
        let r = RefreshTokenRequest {
            refresh_token: "secret-token".into(),
        };
        assert!(!format!("{r:?}").contains("secret-token"));
    }

    #[test]
    fn open_keys_are_valid_operation_keys() {
        let id = Uuid::nil();
        assert_eq!(
            account_open_key(id).as_str(),
            "member:00000000-0000-0000-0000-000000000000:account"
        );
    }
}
