//! The few fields of the services' answers the benchmark reads, per the HTTP contracts in
//! docs/CONVENTIONS.md. Deliberately tolerant (unknown fields ignored), so the benchmark
//! measures a service without being rebuilt with every change to its wire types.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct Created {
    pub id: i64,
}

#[derive(Debug, Deserialize)]
pub struct PassIssued {
    pub pass: String,
}

#[derive(Debug, Deserialize)]
pub struct Quota {
    pub quota: i64,
    pub in_flight: i64,
}

#[derive(Debug, Deserialize)]
pub struct ReservationMade {
    pub id: uuid::Uuid,
}

#[derive(Debug, Deserialize)]
pub struct Payment {
    pub id: uuid::Uuid,
    pub state: String,
}

/// A payment state no further step will change.
pub fn is_terminal(state: &str) -> bool {
    matches!(state, "COMPLETED" | "FAILED" | "REFUNDED")
}
