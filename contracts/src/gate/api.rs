//! Wire types of the gate, shared by the server and its typed client.

use chrono::{DateTime, Utc};
use paysaga_common::auth::MemberId;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// `POST /v1/passes`: ask for a pass to reserve one unit of `product_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IssuePass {
    #[schema(example = 42, minimum = 1)]
    pub product_id: i64,
}

/// A signed pass: present `pass` to `POST order /v1/reservations` before `expires_at`.
/// Asking again while it is live returns the same pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PassIssued {
    /// `v1.<claims>.<Ed25519 signature>`, verified by the order service.
    pub pass: String,
    pub pass_id: Uuid,
    pub product_id: i64,
    pub member_id: MemberId,
    pub expires_at: DateTime<Utc>,
}

/// `GET /v1/quota/{product_id}`: what the shared quota holds right now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QuotaView {
    pub product_id: i64,
    /// Passes that may still be issued.
    pub quota: i64,
    /// Passes issued and not yet expired.
    pub in_flight: i64,
}

/// The gate's own error codes (the common ones are in `paysaga_common::error::codes`).
pub mod codes {
    /// No quota left: every unit is sold, reserved or promised to a live pass.
    pub const SOLD_OUT: &str = "SOLD_OUT";
    /// `product_id` is not a positive integer.
    pub const INVALID_PRODUCT_ID: &str = "INVALID_PRODUCT_ID";
    /// The order service does not list this product.
    pub const PRODUCT_NOT_FOUND: &str = "PRODUCT_NOT_FOUND";
    /// The shared quota is unreachable and this instance's fallback allowance is used
    /// up (or it has not learned the product list yet): retry shortly. Never a sign
    /// that the product is sold out.
    pub const QUOTA_UNAVAILABLE: &str = "QUOTA_UNAVAILABLE";
    /// The product admits only accounts created before a time (its eligibility rule),
    /// and this member's was made later: no pass, no quota spent (403).
    pub const ACCOUNT_TOO_NEW: &str = crate::eligibility::codes::ACCOUNT_TOO_NEW;
    /// The product admits only members whose email is verified (its eligibility rule),
    /// and this member's token says it is not: no pass, no quota spent (403).
    pub const EMAIL_NOT_VERIFIED: &str = crate::eligibility::codes::EMAIL_NOT_VERIFIED;
}
