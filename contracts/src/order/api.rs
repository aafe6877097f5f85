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
    /// Every unit ever created for the product: `available + reserved + sold`.
    pub units_total: i64,
    pub available: i64,
    pub reserved: i64,
    pub sold: i64,
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
}
