//! Wire types of the order service, shared by the server and its typed client.

use chrono::{DateTime, Utc};
use paysaga_common::auth::MemberId;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::eligibility::EligibilityRule;

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
    /// How long a reservation of this product holds its unit and the price on the
    /// buyer's account, 1 to 86,400 seconds; absent, the order service's
    /// `RESERVATION_TTL_SECS` (600). A drop may choose e.g. 120.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = 120, minimum = 1, maximum = 86400)]
    pub reservation_ttl_secs: Option<u32>,
    /// Who may take part (docs/gate.md, "Eligibility"): the gate refuses a pass to a
    /// member who fails a rule, with the rule's code, before any quota is spent. Every
    /// rule must hold, so a kind given twice is kept once (two "created before" rules
    /// are the earlier). At most 16. Absent or empty: every member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 16)]
    pub eligibility: Vec<EligibilityRule>,
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
    /// The product's own reservation hold time in seconds; `null`: the order service's
    /// `RESERVATION_TTL_SECS`.
    #[serde(default)]
    pub reservation_ttl_secs: Option<u32>,
    /// Who may take part; empty: every member.
    #[serde(default)]
    pub eligibility: Vec<EligibilityRule>,
    pub created_at: DateTime<Utc>,
}

/// `GET /v1/products/{id}/availability`: units that can be reserved right now. Also the
/// answer to the gate's report of its passes in flight (`POST .../promises`), read after
/// the units the report freed went to the waitlist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Availability {
    pub product_id: i64,
    pub available: i64,
    /// Members waiting in the product's line. While anyone waits, a unit that comes
    /// back is theirs: the gate's quota stays 0.
    #[serde(default)]
    pub waiting: i64,
}

/// `POST /v1/products/{id}/promises` (gate): the product's passes in flight (issued, not
/// used, not expired). AVAILABLE units up to this many are promised to them: not on
/// sale, so with none beyond them the product is sold out for joining the waitlist;
/// units beyond them go to the head of the line while anyone waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReportPromises {
    pub in_flight: i64,
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

wire_names!(ReservationState {
    Reserved => RESERVED,
    Confirmed => CONFIRMED,
    Cancelled => CANCELLED,
    Expired => EXPIRED,
});

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
    /// The account the price is held on: the payment for this reservation must come
    /// from it. Null for reservations made before funds holds.
    #[serde(default)]
    pub account_id: Option<i64>,
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
    /// The asked-for pass ids that are on a reservation (in any state), or whose holder
    /// was refused for want of funds (no unit was taken for them).
    pub used: Vec<Uuid>,
}

/// The order service's own error codes (the common ones are in
/// `paysaga_common::error::codes`): the `code` of its error bodies, typed. The wire
/// strings are `as_str`; a caller reads a refusal's code with [`ErrorCode::parse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    SoldOut,
    /// The member already holds a live reservation of the product, or has reserved and
    /// bought as many units as the order service's `PURCHASE_CAP` allows.
    MemberLimitReached,
    PassMalformed,
    PassInvalidSignature,
    PassExpired,
    PassWrongProduct,
    PassWrongMember,
    PassAlreadyUsed,
    ProductNotFound,
    ReservationNotFound,
    ReservationExpired,
    ReservationCancelled,
    ReservationConfirmed,
    InvalidName,
    InvalidPrice,
    InvalidUnits,
    InvalidProductId,
    TooManyPassIds,
    /// Joining a waitlist while units are on sale: buy one instead.
    NotSoldOut,
    /// The member has no entry in the product's waitlist (leave), or never had one (read).
    NotOnWaitlist,
    /// No such offer, or it is another member's.
    OfferNotFound,
    /// The offer's deadline passed; its unit went to the next waiter or back on sale.
    OfferExpired,
    /// The offer was given up by leaving the waitlist.
    OfferReleased,
    /// `POST /v1/events/ack` named no event id, or more than 1,000.
    InvalidEventIds,
    /// The buyer's available balance (balance minus what their live holds hold) does not
    /// cover the price: nothing was held and no unit taken.
    InsufficientFunds,
    /// The member has no account to hold the price on (yet): nothing was held and no
    /// unit taken.
    NoAccount,
    /// A product's `reservation_ttl_secs` outside 1 to 86,400.
    InvalidReservationTtl,
    /// A product's `eligibility` names a rule kind twice.
    InvalidEligibility,
    /// The product admits only accounts created before a time, and the member's was
    /// made later (joining its waitlist).
    AccountTooNew,
    /// The product admits only members whose email is verified, and the member's token
    /// says it is not (joining its waitlist).
    EmailNotVerified,
    /// Only under the order service's optimistic `CLAIM_STRATEGY` (a benchmark
    /// alternative): another claim changed the product's counter first; nothing was held
    /// and no unit taken, the same pass may be used again.
    ClaimConflict,
}

wire_names!(
    ErrorCode,
    /// [`ErrorCode`]'s wire strings as constants, for callers that compare a body's `code`
    /// as text.
    mod codes {
        SoldOut => SOLD_OUT,
        MemberLimitReached => MEMBER_LIMIT_REACHED,
        PassMalformed => PASS_MALFORMED,
        PassInvalidSignature => PASS_INVALID_SIGNATURE,
        PassExpired => PASS_EXPIRED,
        PassWrongProduct => PASS_WRONG_PRODUCT,
        PassWrongMember => PASS_WRONG_MEMBER,
        PassAlreadyUsed => PASS_ALREADY_USED,
        ProductNotFound => PRODUCT_NOT_FOUND,
        ReservationNotFound => RESERVATION_NOT_FOUND,
        ReservationExpired => RESERVATION_EXPIRED,
        ReservationCancelled => RESERVATION_CANCELLED,
        ReservationConfirmed => RESERVATION_CONFIRMED,
        InvalidName => INVALID_NAME,
        InvalidPrice => INVALID_PRICE,
        InvalidUnits => INVALID_UNITS,
        InvalidProductId => INVALID_PRODUCT_ID,
        TooManyPassIds => TOO_MANY_PASS_IDS,
        NotSoldOut => NOT_SOLD_OUT,
        NotOnWaitlist => NOT_ON_WAITLIST,
        OfferNotFound => OFFER_NOT_FOUND,
        OfferExpired => OFFER_EXPIRED,
        OfferReleased => OFFER_RELEASED,
        InvalidEventIds => INVALID_EVENT_IDS,
        InsufficientFunds => INSUFFICIENT_FUNDS,
        NoAccount => NO_ACCOUNT,
        InvalidReservationTtl => INVALID_RESERVATION_TTL,
        InvalidEligibility => INVALID_ELIGIBILITY,
        AccountTooNew => ACCOUNT_TOO_NEW,
        EmailNotVerified => EMAIL_NOT_VERIFIED,
        ClaimConflict => CLAIM_CONFLICT,
    }
);

/// The operation key of the hold that sets a reservation's price aside on the buyer's
/// account: `res:{reservation_id}:hold`. The order service places and releases it under
/// this key, and the saga's debit captures it by the same key, so any instance's retry
/// of either is the same operation.
pub fn hold_key(reservation_id: Uuid) -> String {
    format!("res:{reservation_id}:hold")
}

/// The reservation a [`hold_key`] names, if it is one.
pub fn reservation_of_hold(key: &str) -> Option<Uuid> {
    key.strip_prefix("res:")?
        .strip_suffix(":hold")?
        .parse()
        .ok()
}

/// One operation of `POST /v1/batch` (service credential). Each is answered as its own
/// endpoint would answer it; the confirms and cancels of one batch commit together (a
/// batch naming a reservation more than once, in rounds: the k-th operation on each
/// reservation in round k, each round committed; a 5xx reply to one operation is an
/// unknown outcome, to be asked by reservation id).
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

wire_names!(WaitlistState {
    Waiting => WAITING,
    Offered => OFFERED,
    Taken => TAKEN,
    Expired => EXPIRED,
    Skipped => SKIPPED,
    Left => LEFT,
});

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

wire_names!(OfferState {
    Offered => OFFERED,
    Taken => TAKEN,
    Expired => EXPIRED,
    Released => RELEASED,
});

/// A state name none of the state enums here knows: what a stored or received value
/// that is not one of them reads as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownState {
    pub kind: &'static str,
    pub value: String,
}

/// `FromStr` and `TryFrom<String>` through each state enum's `parse`.
macro_rules! parsed_from_text {
    ($($t:ty => $kind:literal),* $(,)?) => {$(
        impl std::str::FromStr for $t {
            type Err = UnknownState;
            fn from_str(s: &str) -> Result<Self, UnknownState> {
                <$t>::parse(s).ok_or_else(|| UnknownState { kind: $kind, value: s.to_owned() })
            }
        }

        impl TryFrom<String> for $t {
            type Error = UnknownState;
            fn try_from(s: String) -> Result<Self, UnknownState> {
                s.parse()
            }
        }
    )*};
}

parsed_from_text!(
    ReservationState => "reservation state",
    WaitlistState => "waitlist entry state",
    OfferState => "offer state",
);

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

/// The outbox's wire types, the same for every service that serves one.
pub use paysaga_common::outbox::{
    AckEvents, OutboxEvent, OutboxPage, OutboxQuery, DEFAULT_OUTBOX_PAGE, MAX_OUTBOX_PAGE,
};

/// `data` of `reservation.expired`, `waitlist.offer_made` and `waitlist.offer_expired`:
/// the payloads the webhook platform passes on as they are.
pub use crate::events::{
    ReservationExpired, WaitlistOfferExpired as OfferExpired, WaitlistOfferMade as OfferMade,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_reads_back_and_serialises_as_its_wire_string() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
            assert_eq!(
                serde_json::to_value(code).expect("serialises"),
                serde_json::json!(code.as_str())
            );
        }
        assert_eq!(ErrorCode::parse("INTERNAL"), None);
        // The eligibility judge's refusals pass through unchanged.
        use crate::eligibility::codes as judge;
        assert_eq!(codes::INVALID_ELIGIBILITY, judge::INVALID_ELIGIBILITY);
        assert_eq!(codes::ACCOUNT_TOO_NEW, judge::ACCOUNT_TOO_NEW);
    }

    #[test]
    fn states_read_from_text_and_refuse_unknown_names() {
        for s in [
            ReservationState::Reserved,
            ReservationState::Confirmed,
            ReservationState::Cancelled,
            ReservationState::Expired,
        ] {
            assert_eq!(ReservationState::try_from(s.as_str().to_owned()), Ok(s));
        }
        assert_eq!(
            "SOLD".parse::<ReservationState>(),
            Err(UnknownState {
                kind: "reservation state",
                value: "SOLD".into()
            })
        );
        assert_eq!("LEFT".parse::<WaitlistState>(), Ok(WaitlistState::Left));
        assert_eq!("TAKEN".parse::<OfferState>(), Ok(OfferState::Taken));
    }

    #[test]
    fn a_hold_key_names_its_reservation_and_is_an_operation_key() {
        let id = Uuid::now_v7();
        let key = hold_key(id);
        assert!(crate::account::api::OperationKey::parse(key.clone()).is_ok());
        assert_eq!(reservation_of_hold(&key), Some(id));
        assert_eq!(reservation_of_hold("pay:1:debit"), None);
        assert_eq!(reservation_of_hold("res:not-a-uuid:hold"), None);
    }
}
