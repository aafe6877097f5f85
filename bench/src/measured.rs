//! The figures the targets are judged on, filled in by whichever scenarios ran.

use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Measured {
    /// Units in the drops of scenarios 1 and 2.
    pub units: u64,
    /// Scenario 1 (first drop): `POST /v1/reservations` the order service counted.
    pub gate_drop_reached_order: Option<u64>,
    /// Scenario 1 and 2: p95 of the time for a losing buyer to learn SOLD_OUT (µs).
    pub gate_drop_loser_p95_us: Option<u64>,
    pub direct_drop_reached_order: Option<u64>,
    pub direct_drop_loser_p95_us: Option<u64>,
    /// Gate passes issued per second, and sold-out answers per second.
    pub pass_rate: Option<f64>,
    pub sold_out_rate: Option<f64>,
    /// The HTTP + buyer auth ceiling measured right before and after the gate phases (mean).
    pub http_auth_beside_gate: Option<f64>,
    /// Redis bytes per in-flight pass.
    pub bytes_per_pass: Option<f64>,
    /// Highest sampled RSS of each service during the drops with the gate (MiB).
    pub service_peak_mib: Vec<(String, f64)>,
    /// Largest growth of a service's peak RSS from the first to the third drop (MiB).
    pub rss_growth_mib: Option<(String, f64)>,
    /// SKIP LOCKED p95 and single-counter FOR UPDATE p95 at 100 concurrent claimers (µs).
    pub claim_p95_skip_locked_us: Option<f64>,
    pub claim_p95_counter_us: Option<f64>,
    /// Payments per second end to end and PostgreSQL commits per payment.
    pub payments_per_s: Option<f64>,
    pub commits_per_payment: Option<f64>,
}
