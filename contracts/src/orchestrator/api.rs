//! The orchestrator's wire types, shared by its server and its typed client.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

/// Error codes this service answers with, beside the common ones in
/// `paysaga_common::error::codes`. Stable: callers match on them.
pub mod codes {
    paysaga_common::error_codes! {
        /// `POST /v1/payments` without an `Idempotency-Key` header.
        IDEMPOTENCY_KEY_MISSING,
        /// An `Idempotency-Key` outside 1-255 visible ASCII characters.
        IDEMPOTENCY_KEY_INVALID,
        /// The key was used before with a different body (422).
        IDEMPOTENCY_KEY_REUSED,
        /// The first request with this key is still running (409, `Retry-After`).
        IDEMPOTENCY_KEY_IN_PROGRESS,
        /// No such reservation, or not the caller's.
        RESERVATION_NOT_FOUND,
        /// The reservation is not RESERVED (expired, cancelled or already confirmed).
        RESERVATION_NOT_PAYABLE,
        /// The reservation already has a payment (under another Idempotency-Key).
        RESERVATION_ALREADY_PAID,
        /// No such account, or not the caller's member account.
        ACCOUNT_NOT_FOUND,
        /// No such payment, or not the caller's.
        PAYMENT_NOT_FOUND,
        /// Refund asked for a payment that is not a settled COMPLETED one.
        PAYMENT_NOT_REFUNDABLE,
        /// Resume asked for a payment with nothing left to do.
        PAYMENT_NOT_RESUMABLE,
        /// A webhook endpoint's URL is not an absolute http URL with a host (422).
        WEBHOOK_URL_INVALID,
        /// A webhook endpoint's host is an address deliveries may not reach: loopback,
        /// private, link-local (the cloud metadata address among them), unique-local,
        /// multicast, reserved (422; see `WEBHOOK_ALLOW_PRIVATE_TARGETS`).
        WEBHOOK_ADDRESS_FORBIDDEN,
        /// A subscription names a type that is not in the event catalogue (422).
        EVENT_TYPE_UNKNOWN,
        /// No such webhook endpoint.
        WEBHOOK_ENDPOINT_NOT_FOUND,
        /// No such webhook delivery.
        WEBHOOK_DELIVERY_NOT_FOUND,
        /// Replay asked for a delivery that is not DEAD (409).
        WEBHOOK_DELIVERY_NOT_DEAD,
    }
}

/// The page an operator list (`ListPayments`, `ListDeliveries`) returns when the query
/// names no `limit`.
pub const DEFAULT_PAGE: i64 = 50;
/// The most an operator list's `limit` may ask for.
pub const MAX_PAGE: i64 = 500;

/// An operator list's `limit`, checked: [`DEFAULT_PAGE`] when absent, `INVALID_QUERY`
/// outside 1 to [`MAX_PAGE`].
pub fn page_limit(asked: Option<i64>) -> Result<i64, paysaga_common::ApiError> {
    let limit = asked.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(paysaga_common::ApiError::bad_request(
            paysaga_common::error::codes::INVALID_QUERY,
            format!("limit must be 1 to {MAX_PAGE}"),
        ));
    }
    Ok(limit)
}

/// An operator list's `state` filter, read as a `T`: `None` when absent, `INVALID_QUERY`
/// for a name `T` does not know (the message ends with `names`, when the list has them
/// to offer).
pub fn state_filter<T: std::str::FromStr>(
    asked: Option<&str>,
    names: &str,
) -> Result<Option<T>, paysaga_common::ApiError> {
    asked
        .map(|s| {
            s.parse::<T>().map_err(|_| {
                paysaga_common::ApiError::bad_request(
                    paysaga_common::error::codes::INVALID_QUERY,
                    format!("unknown state {s:?}{names}"),
                )
            })
        })
        .transpose()
}

/// `POST /v1/payments`: pay for a reservation from an account, both the caller's.
/// The amount is the reservation's price; the client never sends one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePayment {
    pub reservation_id: Uuid,
    pub account_id: i64,
}

/// A payment as the buyer sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Payment {
    pub id: Uuid,
    pub reservation_id: Uuid,
    pub account_id: i64,
    pub member_id: String,
    /// Minor units, from the reservation's price.
    pub amount: i64,
    /// PROCESSING, ACCOUNT_DEBITED, ORDER_CONFIRMED, COMPLETED, FAILED, REFUND_PROCESSING, REFUNDED.
    #[schema(example = "COMPLETED")]
    pub state: String,
    /// Whether `state` is final for the buyer (COMPLETED, FAILED, REFUNDED).
    pub terminal: bool,
    /// Why a FAILED payment failed, as the downstream said (e.g. `INSUFFICIENT_FUNDS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A payment as an operator sees it: the buyer's view plus the driving machinery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PaymentAdmin {
    #[serde(flatten)]
    pub payment: Payment,
    /// The action still owed (DEBIT, CONFIRM, COMPLETE, CANCEL_RESERVATION, CANCEL_ORDER, REFUND).
    pub pending_action: Option<String>,
    /// Attempts of the pending action that ended unknown.
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub needs_attention: bool,
    pub last_error: Option<String>,
    pub lease_owner: Option<Uuid>,
    pub lease_until: Option<DateTime<Utc>>,
    pub version: i64,
}

/// One recorded step of a payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Step {
    pub seq: i64,
    pub action: String,
    pub operation_key: String,
    /// SUCCEEDED, REJECTED, UNKNOWN, or OPERATOR for an operator's action.
    pub outcome: String,
    pub from_state: String,
    pub to_state: String,
    pub downstream_status: Option<i32>,
    pub latency_ms: i32,
    pub error: Option<String>,
    /// The call's own answer was lost and a status query settled the outcome.
    #[serde(default)]
    pub settled_by_query: bool,
    /// The orchestrator instance that recorded it.
    pub driver: Uuid,
    pub created_at: DateTime<Utc>,
}

/// `GET /v1/payments/{id}/steps`: a payment with its full step timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PaymentTimeline {
    pub payment: PaymentAdmin,
    pub steps: Vec<Step>,
}

/// `GET /v1/payments` filters. Newest first; pass `next_cursor` back as `cursor`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListPayments {
    /// Only payments in this state.
    #[param(
        pattern = "^(PROCESSING|ACCOUNT_DEBITED|ORDER_CONFIRMED|COMPLETED|FAILED|REFUND_PROCESSING|REFUNDED)$"
    )]
    pub state: Option<String>,
    pub needs_attention: Option<bool>,
    /// Only payments created at least this many seconds ago.
    #[param(minimum = 0, maximum = 315_360_000)]
    pub min_age_secs: Option<i64>,
    /// Only payments created at most this many seconds ago.
    #[param(minimum = 0, maximum = 315_360_000)]
    pub max_age_secs: Option<i64>,
    /// Only payments whose last error contains this text.
    pub error_contains: Option<String>,
    /// 1-500, default 50.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<Uuid>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PaymentPage {
    pub payments: Vec<PaymentAdmin>,
    /// Set when there may be more: pass it as `cursor`.
    pub next_cursor: Option<Uuid>,
}

/// `POST /v1/webhook-endpoints`: where to deliver events, and which.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhookEndpoint {
    /// `https://` (or `http://`), a lower-case host name or an IPv4 address, an optional
    /// port, a path and query of plain characters (no credentials, fragment or
    /// percent-escapes), at most 2048 characters. Over `https` the endpoint's certificate
    /// is verified, host name included.
    /// An IPv4 address that deliveries may not reach (loopback, private, link-local,
    /// CGNAT, multicast, reserved) is refused with `WEBHOOK_ADDRESS_FORBIDDEN`, and a
    /// name is checked on every address it resolves to when delivering.
    #[schema(
        max_length = 2048,
        pattern = r"^https?://([a-z]([a-z0-9]|-[a-z0-9])*(\.[a-z]([a-z0-9]|-[a-z0-9])*)*|(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3})(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?(/[A-Za-z0-9._~!$&'()*+,;=:@/-]*)?(\?[A-Za-z0-9._~!$&'()*+,;=:@/?-]*)?$",
        example = "https://shipping.example.com/paysaga"
    )]
    pub url: String,
    /// Event types to deliver (see the catalogue); empty or absent: every type.
    #[serde(default)]
    #[schema(max_items = 32, value_type = Vec<crate::events::EventType>)]
    pub event_types: Vec<String>,
    /// Free text for the operator, at most 500 characters.
    #[serde(default)]
    #[schema(max_length = 500)]
    pub description: Option<String>,
}

/// A webhook endpoint (never with its secret, which is shown once, at creation).
// Also the row the webhook platform reads from `webhook_endpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, sqlx::FromRow)]
pub struct WebhookEndpoint {
    pub id: Uuid,
    pub url: String,
    /// Subscribed types; empty: every type.
    pub event_types: Vec<String>,
    /// A disabled endpoint gets no new deliveries and its pending ones wait.
    pub enabled: bool,
    pub description: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /v1/webhook-endpoints` answer: the endpoint and its signing secret, shown
/// this once only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WebhookEndpointCreated {
    #[serde(flatten)]
    pub endpoint: WebhookEndpoint,
    /// `whsec_` and 64 hex digits: the HMAC-SHA256 key of this endpoint's signatures.
    pub secret: String,
}

/// `GET /v1/webhook-endpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WebhookEndpointList {
    /// Oldest first.
    pub endpoints: Vec<WebhookEndpoint>,
}

/// `GET /v1/webhook-deliveries` filters. Newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListDeliveries {
    /// Only deliveries in this state.
    #[param(pattern = "^(PENDING|DELIVERED|DEAD)$")]
    pub state: Option<String>,
    /// Only deliveries to this endpoint.
    pub endpoint_id: Option<Uuid>,
    /// 1-500, default 50.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// One event's delivery to one endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WebhookDelivery {
    pub id: Uuid,
    pub event_id: Uuid,
    pub event_type: String,
    /// The event's ordering key (a payment, reservation or offer id).
    pub subject: String,
    pub endpoint_id: Uuid,
    /// PENDING, DELIVERED or DEAD.
    #[schema(example = "DEAD")]
    pub state: String,
    /// Attempts started.
    pub attempts: i32,
    /// When the next attempt is due (PENDING only).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The last attempt's HTTP status, if it got one.
    pub last_status: Option<i32>,
    /// The class of the last failed attempt's failure (never the receiver's answer or
    /// the raw error text); with `http_status`, `last_status` is the status.
    pub last_error: Option<DeliveryFailure>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Why a delivery attempt failed, as operators see it: the class of the failure, never
/// the receiver's bytes or the raw error text (which could carry what an internal
/// service answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryFailure {
    /// The endpoint's address, as written or as its name resolved, is one deliveries may
    /// not reach (loopback, private, link-local, ...); nothing was sent.
    ForbiddenAddress,
    /// The host name did not resolve.
    Dns,
    /// No connection could be made (refused, unreachable).
    Connect,
    /// No complete answer within `WEBHOOK_TIMEOUT_MS`.
    Timeout,
    /// An answer other than 2xx (a redirect included); `last_status` holds it.
    HttpStatus,
    /// The exchange failed otherwise (the connection dropped mid-request, an answer
    /// that is not HTTP).
    Request,
}

// The stored names are the `webhook_deliveries_last_error_class` constraint's.
crate::wire_names!(
    DeliveryFailure {
        ForbiddenAddress => forbidden_address,
        Dns => dns,
        Connect => connect,
        Timeout => timeout,
        HttpStatus => http_status,
        Request => request,
    },
    unknown: UnknownDeliveryFailure
);

/// A stored failure class that is none of [`DeliveryFailure`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown delivery failure class {0:?}")]
pub struct UnknownDeliveryFailure(pub String);

/// `POST /v1/webhook-endpoints/{id}/rotate-secret` answer: the endpoint's new signing
/// secret, shown this once. The one before stays valid until `previous_expires_at`;
/// until then every delivery carries a signature under each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WebhookSecretRotated {
    pub endpoint_id: Uuid,
    /// `whsec_` and 64 hex digits: the new HMAC-SHA256 key.
    pub secret: String,
    /// Until when the previous secret's signature is sent beside the new one
    /// (`WEBHOOK_SECRET_GRACE_SECS` after the rotation).
    pub previous_expires_at: DateTime<Utc>,
}

/// `GET /v1/webhook-deliveries`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WebhookDeliveryPage {
    pub deliveries: Vec<WebhookDelivery>,
}
