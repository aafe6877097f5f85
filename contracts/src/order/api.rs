//! Wire types of the order service, shared by the server and its typed client.

use chrono::{DateTime, Utc};
use paysaga_common::auth::MemberId;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// `POST /v1/products`: a new product with `units` sellable units at `price` minor units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreateProduct {
    /// 1 to 200 characters without control characters once surrounding whitespace is
    /// trimmed.
    #[schema(
        example = "Limited sneaker, size 42",
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub name: String,
    /// Minor units (cents), strictly positive.
    #[schema(example = 12900, minimum = 1, maximum = 1_000_000_000_000_i64)]
    pub price: i64,
    /// Initial number of units, 0 to 100,000 (more are added in further calls).
    #[schema(example = 100, minimum = 0, maximum = 100_000)]
    pub units: i64,
}

/// `POST /v1/products/{id}/units`: add `count` more units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AddUnits {
    /// 1 to 100,000.
    #[schema(example = 50, minimum = 1, maximum = 100_000)]
    pub count: i64,
}

/// A product and the current state of its units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Product {
    pub id: i64,
    pub name: String,
    /// Minor units (cents).
    pub price: i64,
    /// Every unit ever created for the product: `available + reserved + offered + sold`.
    pub units_total: i64,
    pub available: i64,
    pub reserved: i64,
    /// Held for a member of the waitlist until their offer is taken or expires.
    pub offered: i64,
    pub sold: i64,
    /// Members waiting in the product's waitlist (not yet offered a unit).
    pub waiting: i64,
    pub created_at: DateTime<Utc>,
}

/// `GET /v1/products/{id}/availability`: units that can be reserved right now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Availability {
    pub product_id: i64,
    pub available: i64,
}

/// `POST /v1/reservations`: claim one unit with a gate pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreateReservation {
    pub product_id: i64,
    /// The pass from `POST gate /v1/passes`, as issued.
    pub pass: String,
}

/// Where a reservation is in its life. `RESERVED` is the only live state; the other
/// three are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReservationState {
    Reserved,
    Confirmed,
    Cancelled,
    Expired,
}

impl ReservationState {
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationState::Reserved => "RESERVED",
            ReservationState::Confirmed => "CONFIRMED",
            ReservationState::Cancelled => "CANCELLED",
            ReservationState::Expired => "EXPIRED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "RESERVED" => Some(ReservationState::Reserved),
            "CONFIRMED" => Some(ReservationState::Confirmed),
            "CANCELLED" => Some(ReservationState::Cancelled),
            "EXPIRED" => Some(ReservationState::Expired),
            _ => None,
        }
    }
}

impl std::fmt::Display for ReservationState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One unit held for one member until `expires_at`, then confirmed (sold), cancelled
/// or expired (the unit back on sale).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Reservation {
    pub id: Uuid,
    pub product_id: i64,
    pub member_id: MemberId,
    pub unit_id: i64,
    /// The product's price when the unit was reserved, minor units.
    pub price: i64,
    pub state: ReservationState,
    pub expires_at: DateTime<Utc>,
    /// Set once confirmed.
    pub order_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /v1/passes/used`: which of these pass ids have made a reservation. For the
/// gate's quota job, so a pass whose reservation already took its unit is not also
/// counted as in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsedPassesQuery {
    /// At most 1,000 ids.
    #[schema(max_items = 1000)]
    pub pass_ids: Vec<Uuid>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsedPasses {
    /// The asked-for pass ids that are on a reservation (in any state).
    pub used: Vec<Uuid>,
}

/// The order service's own error codes (the common ones are in
/// `paysaga_common::error::codes`).
pub mod codes {
    pub const SOLD_OUT: &str = "SOLD_OUT";
    /// The member already holds a live reservation of the product, or has reserved and
    /// bought as many units as the order service's `PURCHASE_CAP` allows.
    pub const MEMBER_LIMIT_REACHED: &str = "MEMBER_LIMIT_REACHED";
    pub const PASS_MALFORMED: &str = "PASS_MALFORMED";
    pub const PASS_INVALID_SIGNATURE: &str = "PASS_INVALID_SIGNATURE";
    pub const PASS_EXPIRED: &str = "PASS_EXPIRED";
    pub const PASS_WRONG_PRODUCT: &str = "PASS_WRONG_PRODUCT";
    pub const PASS_WRONG_MEMBER: &str = "PASS_WRONG_MEMBER";
    pub const PASS_ALREADY_USED: &str = "PASS_ALREADY_USED";
    pub const PRODUCT_NOT_FOUND: &str = "PRODUCT_NOT_FOUND";
    pub const RESERVATION_NOT_FOUND: &str = "RESERVATION_NOT_FOUND";
    pub const RESERVATION_EXPIRED: &str = "RESERVATION_EXPIRED";
    pub const RESERVATION_CANCELLED: &str = "RESERVATION_CANCELLED";
    pub const RESERVATION_CONFIRMED: &str = "RESERVATION_CONFIRMED";
    pub const INVALID_NAME: &str = "INVALID_NAME";
    pub const INVALID_PRICE: &str = "INVALID_PRICE";
    pub const INVALID_UNITS: &str = "INVALID_UNITS";
    pub const INVALID_PRODUCT_ID: &str = "INVALID_PRODUCT_ID";
    pub const TOO_MANY_PASS_IDS: &str = "TOO_MANY_PASS_IDS";
    /// Joining a waitlist while units are on sale: buy one instead.
    pub const NOT_SOLD_OUT: &str = "NOT_SOLD_OUT";
    /// Joining a waitlist of a product none of whose units is held by a reservation or
    /// an offer: no unit can come back.
    pub const NOTHING_TO_WAIT_FOR: &str = "NOTHING_TO_WAIT_FOR";
    /// The member has no entry in the product's waitlist (leave), or never had one (read).
    pub const NOT_ON_WAITLIST: &str = "NOT_ON_WAITLIST";
    /// No such offer, or it is another member's.
    pub const OFFER_NOT_FOUND: &str = "OFFER_NOT_FOUND";
    /// The offer's deadline passed; its unit went to the next waiter or back on sale.
    pub const OFFER_EXPIRED: &str = "OFFER_EXPIRED";
    /// The offer was given up by leaving the waitlist.
    pub const OFFER_RELEASED: &str = "OFFER_RELEASED";
    /// `POST /v1/events/ack` named no event id, or more than 1,000.
    pub const INVALID_EVENT_IDS: &str = "INVALID_EVENT_IDS";
}

/// One operation of `POST /v1/batch` (service credential). Each is answered as its own
/// endpoint would answer it; the confirms and cancels of one batch commit together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OrderOp {
    /// As `POST /v1/reservations/{id}/confirm`.
    Confirm { reservation_id: Uuid },
    /// As `POST /v1/reservations/{id}/cancel` by a service.
    Cancel { reservation_id: Uuid },
    /// As `GET /v1/reservations/{id}` by a service.
    Reservation { reservation_id: Uuid },
}

/// `POST /v1/batch`: up to `batch::MAX_OPS` operations, answered in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderBatch {
    pub ops: Vec<OrderOp>,
    /// The W3C `traceparent` of the payment each operation belongs to, by position
    /// (`null` for one without): each operation's span joins its own payment's trace.
    /// Sent only when tracing is on; absent, the batch is answered the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traceparents: Vec<Option<String>>,
}

impl OrderBatch {
    /// A batch of `ops` without trace contexts.
    pub fn new(ops: Vec<OrderOp>) -> Self {
        Self {
            ops,
            traceparents: Vec::new(),
        }
    }
}

/// Where a waitlist entry is. `WAITING` and `OFFERED` are live (at most one live entry
/// per member and product); the others are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WaitlistState {
    /// In line; `position` says where.
    Waiting,
    /// A unit is held for the member until the offer's `expires_at`.
    Offered,
    /// The offer became a reservation.
    Taken,
    /// The offer was not taken in time; the member is not offered again.
    Expired,
    /// The member was at the purchase cap when a unit came their way.
    Skipped,
    /// The member left.
    Left,
}

impl WaitlistState {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitlistState::Waiting => "WAITING",
            WaitlistState::Offered => "OFFERED",
            WaitlistState::Taken => "TAKEN",
            WaitlistState::Expired => "EXPIRED",
            WaitlistState::Skipped => "SKIPPED",
            WaitlistState::Left => "LEFT",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "WAITING" => WaitlistState::Waiting,
            "OFFERED" => WaitlistState::Offered,
            "TAKEN" => WaitlistState::Taken,
            "EXPIRED" => WaitlistState::Expired,
            "SKIPPED" => WaitlistState::Skipped,
            "LEFT" => WaitlistState::Left,
            _ => return None,
        })
    }
}

/// Where an offer is: `OFFERED` (live, held until `expires_at`), then `TAKEN`,
/// `EXPIRED` or `RELEASED` (the member left the waitlist).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OfferState {
    Offered,
    Taken,
    Expired,
    Released,
}

impl OfferState {
    pub fn as_str(self) -> &'static str {
        match self {
            OfferState::Offered => "OFFERED",
            OfferState::Taken => "TAKEN",
            OfferState::Expired => "EXPIRED",
            OfferState::Released => "RELEASED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "OFFERED" => OfferState::Offered,
            "TAKEN" => OfferState::Taken,
            "EXPIRED" => OfferState::Expired,
            "RELEASED" => OfferState::Released,
            _ => return None,
        })
    }
}

/// A unit held for one waitlist member until `expires_at`: take it with
/// `POST /v1/offers/{offer_id}/reservation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WaitlistOffer {
    pub offer_id: Uuid,
    pub unit_id: i64,
    pub state: OfferState,
    pub expires_at: DateTime<Utc>,
    /// The reservation made from it, once `TAKEN`.
    pub reservation_id: Option<Uuid>,
}

/// A member's place in a product's waitlist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WaitlistEntry {
    pub id: Uuid,
    pub product_id: i64,
    pub member_id: MemberId,
    pub state: WaitlistState,
    /// While `WAITING`: 1 for the head of the line, 2 for the next, and so on.
    pub position: Option<i64>,
    /// The unit offered to this entry, if one was (held while its state is `OFFERED`).
    pub offer: Option<WaitlistOffer>,
    pub joined_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The event types the order service writes to its outbox (`OutboxEvent::kind`).
pub mod events {
    /// A reservation expired (by the sweep, or by a confirm or cancel that found it past
    /// its deadline). Subject: the reservation id. Data: [`super::ReservationExpired`].
    pub const RESERVATION_EXPIRED: &str = "reservation.expired";
    /// A returned unit was offered to the head of its product's waitlist. Subject: the
    /// offer id. Data: [`super::OfferMade`].
    pub const OFFER_MADE: &str = "waitlist.offer_made";
    /// An offer passed its deadline untaken; the unit went to the next waiter or back on
    /// sale. Subject: the offer id. Data: [`super::OfferExpired`].
    pub const OFFER_EXPIRED: &str = "waitlist.offer_expired";
}

/// One event of the order service's transactional outbox, written in the same
/// transaction as the change it tells of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OutboxEvent {
    /// Stable (a UUIDv7 assigned when the event was written): a consumer deduplicates on it.
    pub id: Uuid,
    /// One of [`events`]: `reservation.expired`, `waitlist.offer_made`,
    /// `waitlist.offer_expired`.
    #[serde(rename = "type")]
    #[schema(example = "reservation.expired")]
    pub kind: String,
    /// The ordering key: the reservation id for `reservation.*`, the offer id for
    /// `waitlist.*`.
    pub subject: String,
    pub occurred_at: DateTime<Utc>,
    /// The payload; ids are strings, timestamps RFC 3339 (see [`ReservationExpired`],
    /// [`OfferMade`], [`OfferExpired`]).
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

/// `GET /v1/events?limit=N`: events not yet relayed, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OutboxPage {
    pub events: Vec<OutboxEvent>,
}

/// The query of `GET /v1/events`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams,
)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OutboxQuery {
    /// 1 to 1,000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// `POST /v1/events/ack`: these events have been taken; they are not served again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckEvents {
    /// 1 to 1,000 event ids; ids already acknowledged or unknown are ignored.
    #[schema(min_items = 1, max_items = 1000)]
    pub ids: Vec<Uuid>,
}

/// Most events one `GET /v1/events` returns and one ack names.
pub const MAX_OUTBOX_PAGE: i64 = 1_000;
/// `GET /v1/events` without `limit`.
pub const DEFAULT_OUTBOX_PAGE: i64 = 100;

/// `data` of `reservation.expired`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReservationExpired {
    pub reservation_id: String,
    pub product_id: String,
    pub member_id: String,
    pub unit_id: String,
    pub expired_at: DateTime<Utc>,
}

/// `data` of `waitlist.offer_made`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OfferMade {
    pub offer_id: String,
    pub product_id: String,
    pub member_id: String,
    pub unit_id: String,
    pub expires_at: DateTime<Utc>,
}

/// `data` of `waitlist.offer_expired`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OfferExpired {
    pub offer_id: String,
    pub product_id: String,
    pub member_id: String,
    pub unit_id: String,
}
