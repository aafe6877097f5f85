//! The event catalogue the merchant's systems receive as webhooks: the event types,
//! their `data` payloads, the delivery body, and the signature scheme with the code a
//! receiver verifies it with (docs/events.md).
//!
//! A delivery is a `POST` of [`EventEnvelope`] as JSON, with the headers
//! [`EVENT_ID_HEADER`], [`EVENT_TYPE_HEADER`] and [`SIGNATURE_HEADER`]:
//! `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`, with a second
//! `v1` while an endpoint's previous secret is in its rotation grace.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use utoipa::ToSchema;
use uuid::Uuid;

/// The event types, as they appear in `type`.
pub mod types {
    /// A payment reached COMPLETED: the buyer was charged and the order confirmed.
    pub const PAYMENT_COMPLETED: &str = "payment.completed";
    /// A payment reached FAILED: nothing was charged (e.g. insufficient funds).
    pub const PAYMENT_FAILED: &str = "payment.failed";
    /// A payment reached REFUNDED: the charge was paid back.
    pub const PAYMENT_REFUNDED: &str = "payment.refunded";
    /// A reservation ran out before it was paid; its unit went back (or on offer).
    pub const RESERVATION_EXPIRED: &str = "reservation.expired";
    /// A returned unit was offered to the member at the head of a product's waitlist.
    pub const WAITLIST_OFFER_MADE: &str = "waitlist.offer_made";
    /// An offer ran out before the member took it.
    pub const WAITLIST_OFFER_EXPIRED: &str = "waitlist.offer_expired";
    /// A member signed up: send them the verification token (their email is not
    /// verified until they hand it back).
    pub const MEMBER_VERIFICATION_REQUESTED: &str = "member.verification_requested";

    /// Every type, in catalogue order.
    pub const ALL: [&str; 7] = [
        PAYMENT_COMPLETED,
        PAYMENT_FAILED,
        PAYMENT_REFUNDED,
        RESERVATION_EXPIRED,
        WAITLIST_OFFER_MADE,
        WAITLIST_OFFER_EXPIRED,
        MEMBER_VERIFICATION_REQUESTED,
    ];

    /// Whether `t` is in the catalogue.
    pub fn is_known(t: &str) -> bool {
        ALL.contains(&t)
    }
}

/// The catalogue's types as a schema (`type`, `event_types`); the wire carries strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum EventType {
    #[serde(rename = "payment.completed")]
    PaymentCompleted,
    #[serde(rename = "payment.failed")]
    PaymentFailed,
    #[serde(rename = "payment.refunded")]
    PaymentRefunded,
    #[serde(rename = "reservation.expired")]
    ReservationExpired,
    #[serde(rename = "waitlist.offer_made")]
    WaitlistOfferMade,
    #[serde(rename = "waitlist.offer_expired")]
    WaitlistOfferExpired,
    #[serde(rename = "member.verification_requested")]
    MemberVerificationRequested,
}

/// The header naming the event (its id, stable across retries: deduplicate on it).
pub const EVENT_ID_HEADER: &str = "Paysaga-Event-Id";
/// The header naming the event's type.
pub const EVENT_TYPE_HEADER: &str = "Paysaga-Event-Type";
/// The header carrying the signature, `t=<unix seconds>,v1=<hex HMAC-SHA256>`.
pub const SIGNATURE_HEADER: &str = "Paysaga-Signature";
/// How old a signature's timestamp a receiver should accept, by default: 5 minutes.
pub const DEFAULT_TOLERANCE_SECS: i64 = 300;

/// The body of every delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventEnvelope {
    /// The event's id (a UUIDv7); the same on every retry and replay.
    pub id: Uuid,
    /// One of the catalogue's types.
    #[serde(rename = "type")]
    #[schema(value_type = EventType)]
    pub event_type: String,
    /// When the event happened (the state change committed).
    pub created_at: DateTime<Utc>,
    /// The type's payload (see the catalogue).
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

/// Which payment a `payment.*` event is about: the fields each of them opens with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PaymentSubject {
    #[schema(format = Uuid)]
    pub payment_id: String,
    pub member_id: String,
    pub account_id: String,
    #[schema(format = Uuid)]
    pub reservation_id: String,
    /// Absent only for payments accepted before products were recorded on payments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_id: Option<String>,
}

/// `payment.completed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PaymentCompleted {
    #[serde(flatten)]
    #[schema(inline)]
    pub payment: PaymentSubject,
    /// Minor units.
    pub amount: i64,
}

/// `payment.failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PaymentFailed {
    #[serde(flatten)]
    #[schema(inline)]
    pub payment: PaymentSubject,
    /// Minor units; nothing was charged.
    pub amount: i64,
    /// Why, as the account service said (e.g. `INSUFFICIENT_FUNDS`).
    #[schema(example = "INSUFFICIENT_FUNDS")]
    pub reason: String,
}

/// `payment.refunded`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PaymentRefunded {
    #[serde(flatten)]
    #[schema(inline)]
    pub payment: PaymentSubject,
    /// Minor units paid back.
    pub amount: i64,
}

/// `reservation.expired` (from the order service).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReservationExpired {
    #[schema(format = Uuid)]
    pub reservation_id: String,
    pub product_id: String,
    pub member_id: String,
    pub unit_id: String,
    pub expired_at: DateTime<Utc>,
}

/// `waitlist.offer_made` (from the order service).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WaitlistOfferMade {
    pub offer_id: String,
    pub product_id: String,
    pub member_id: String,
    pub unit_id: String,
    /// The member must take the unit before this.
    pub expires_at: DateTime<Utc>,
}

/// `waitlist.offer_expired` (from the order service).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WaitlistOfferExpired {
    pub offer_id: String,
    pub product_id: String,
    pub member_id: String,
    pub unit_id: String,
}

/// `member.verification_requested` (from the member service): what the merchant's email
/// carries to the member, who proves the address by handing `token` back
/// (`POST /v1/members/verification`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MemberVerificationRequested {
    #[schema(format = Uuid)]
    pub member_id: String,
    #[schema(example = "ada@example.com")]
    pub email: String,
    /// Signed by the member service; single purpose (it verifies this email of this
    /// member, nothing else) and good until `expires_at`.
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

impl std::fmt::Debug for MemberVerificationRequested {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberVerificationRequested")
            .field("member_id", &self.member_id)
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// The hex HMAC-SHA256 of `"<timestamp>.<body>"` under `secret` (the whole `whsec_...`
/// string is the key).
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = mac(secret);
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `Paysaga-Signature` value for `body` sent at `timestamp`: one `v1` per secret,
/// in the order given (during a rotation's grace, the new secret's then the previous
/// one's, so a receiver holding either verifies).
pub fn signature_header<S: AsRef<str>>(secrets: &[S], timestamp: i64, body: &[u8]) -> String {
    let mut header = format!("t={timestamp}");
    for secret in secrets {
        header.push_str(",v1=");
        header.push_str(&sign(secret.as_ref(), timestamp, body));
    }
    header
}

fn mac(secret: &str) -> Hmac<Sha256> {
    // HMAC takes a key of any length; this cannot fail.
    Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts any key length")
}

/// Why a signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the signature header is not t=<seconds>,v1=<hex>")]
    Malformed,
    #[error("no v1 signature matches the body")]
    Mismatch,
    #[error("the signature is {age_secs} s old, more than the {tolerance_secs} s tolerated")]
    TooOld { age_secs: i64, tolerance_secs: i64 },
}

/// Checks a delivery as a receiver should, before parsing its body: `header` is the
/// `Paysaga-Signature` value, `body` the raw bytes received, `now` the receiver's
/// clock in Unix seconds. Accepts when one `v1` matches (compared in constant time) and
/// the timestamp is within `tolerance_secs` of `now` (either way, for clock skew), which
/// bounds how long a captured request can be replayed. Returns the timestamp.
pub fn verify(
    secret: &str,
    header: &str,
    body: &[u8],
    now: i64,
    tolerance_secs: i64,
) -> Result<i64, SignatureError> {
    let mut timestamp = None;
    let mut candidates = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => {
                timestamp = Some(t.parse::<i64>().map_err(|_| SignatureError::Malformed)?)
            }
            Some(("v1", hex)) => candidates.push(decode_hex(hex).ok_or(SignatureError::Malformed)?),
            // Other schemes may be added later; a receiver ignores what it does not know.
            Some(_) => {}
            None => return Err(SignatureError::Malformed),
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::Malformed)?;
    if candidates.is_empty() {
        return Err(SignatureError::Malformed);
    }
    let matched = candidates.iter().any(|sig| {
        let mut mac = mac(secret);
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.verify_slice(sig).is_ok()
    });
    if !matched {
        return Err(SignatureError::Mismatch);
    }
    let age_secs = now.saturating_sub(timestamp);
    if age_secs.saturating_abs() > tolerance_secs {
        return Err(SignatureError::TooOld {
            age_secs,
            tolerance_secs,
        });
    }
    Ok(timestamp)
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() % 2 == 1 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_0123456789abcdef";

    #[test]
    fn a_signed_body_verifies_and_anything_altered_does_not() {
        let body = br#"{"id":"x","type":"payment.completed"}"#;
        let header = signature_header(&[SECRET], 1_700_000_000, body);
        assert_eq!(
            verify(SECRET, &header, body, 1_700_000_010, 300),
            Ok(1_700_000_000)
        );
        // A byte of the body changed.
        let tampered = br#"{"id":"y","type":"payment.completed"}"#;
        assert_eq!(
            verify(SECRET, &header, tampered, 1_700_000_010, 300),
            Err(SignatureError::Mismatch)
        );
        // Another endpoint's secret.
        assert_eq!(
            verify("whsec_other", &header, body, 1_700_000_010, 300),
            Err(SignatureError::Mismatch)
        );
        // The timestamp moved to make an old capture look fresh: the signature covers it.
        let v1 = header.split_once(",v1=").expect("v1").1;
        let moved = format!("t=1700000500,v1={v1}");
        assert_eq!(
            verify(SECRET, &moved, body, 1_700_000_500, 300),
            Err(SignatureError::Mismatch)
        );
        // Replayed later than the tolerance.
        assert_eq!(
            verify(SECRET, &header, body, 1_700_000_301, 300),
            Err(SignatureError::TooOld {
                age_secs: 301,
                tolerance_secs: 300
            })
        );
        for bad in ["", "t=1", "v1=00", "t=x,v1=00", "t=1,v1=0g", "nonsense"] {
            assert_eq!(
                verify(SECRET, bad, body, 1, 300),
                Err(SignatureError::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn any_of_several_signatures_may_match() {
        let body = b"{}";
        let good = sign(SECRET, 10, body);
        let header = format!("t=10,v1={},v1={good},v0=ignored", "00".repeat(32));
        assert_eq!(verify(SECRET, &header, body, 10, 300), Ok(10));
    }

    #[test]
    fn a_header_for_two_secrets_verifies_under_either_and_no_other() {
        let body = b"{\"id\":1}";
        let header = signature_header(&["whsec_new", "whsec_old"], 10, body);
        assert_eq!(header.matches(",v1=").count(), 2, "{header}");
        assert!(header.starts_with("t=10,v1="));
        for secret in ["whsec_new", "whsec_old"] {
            assert_eq!(verify(secret, &header, body, 10, 300), Ok(10));
        }
        assert_eq!(
            verify("whsec_other", &header, body, 10, 300),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        // A known answer, computed independently with openssl:
        // printf '42.{}' | openssl dgst -sha256 -hmac 'whsec_0123456789abcdef'
        assert_eq!(
            sign(SECRET, 42, b"{}"),
            "8f9045386fa4c80fcde22b8b4ff67932c2cfa54f01d6191c708a4ffe7b55c6c2"
        );
    }

    #[test]
    fn the_schema_enum_spells_the_catalogue() {
        let spelled: Vec<String> = [
            EventType::PaymentCompleted,
            EventType::PaymentFailed,
            EventType::PaymentRefunded,
            EventType::ReservationExpired,
            EventType::WaitlistOfferMade,
            EventType::WaitlistOfferExpired,
            EventType::MemberVerificationRequested,
        ]
        .iter()
        .map(|t| {
            serde_json::to_value(t)
                .expect("serialises")
                .as_str()
                .expect("a string")
                .to_owned()
        })
        .collect();
        assert_eq!(spelled, types::ALL);
    }

    #[test]
    fn every_catalogue_type_is_known_and_others_are_not() {
        for t in types::ALL {
            assert!(types::is_known(t));
        }
        assert!(!types::is_known("payment.created"));
        assert!(!types::is_known(""));
    }
}
