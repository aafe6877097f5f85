//! Events and signed webhooks (docs/events.md): the event log (payment events written by
//! a trigger in the payment's own transaction, order events pulled from the order
//! service's outbox), endpoints, and the delivery worker every instance runs.

pub mod ingest;
pub mod openapi;
pub mod store;
pub mod worker;

pub use worker::backoff;

/// The webhook metrics (`paysaga_*`: they follow the system's event flow, whichever
/// service an event came from).
pub(crate) mod metrics {
    use std::time::Duration;

    /// A delivery attempt's outcome: `delivered`, `failed` (retried later) or `dead`.
    pub fn outcome(outcome: &'static str) {
        metrics::counter!("paysaga_webhook_deliveries_total", "outcome" => outcome).increment(1);
    }

    /// One attempt's duration, answered or not.
    pub fn attempt(took: Duration) {
        metrics::histogram!("paysaga_webhook_attempt_seconds").record(took.as_secs_f64());
    }

    /// The age of the oldest event not yet delivered, and the DEAD deliveries.
    pub fn census(lag_seconds: f64, dead: i64) {
        metrics::gauge!("paysaga_outbox_lag_seconds").set(lag_seconds);
        metrics::gauge!("paysaga_webhook_dead_deliveries").set(dead as f64);
    }

    /// Events taken in from the order service's outbox (new ones only).
    pub fn ingested(n: u64) {
        metrics::counter!("paysaga_events_ingested_total").increment(n);
    }
}
