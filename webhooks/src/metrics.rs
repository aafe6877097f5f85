//! The webhook metrics (`paysaga_*`: they follow the system's event flow, whichever
//! service an event came from).

use std::time::Duration;

/// A delivery attempt's outcome: `delivered`, `failed` (retried later) or `dead`.
pub fn outcome(outcome: &'static str) {
    metrics::counter!("paysaga_webhook_deliveries_total", "outcome" => outcome).increment(1);
}

/// One attempt's duration, answered or not.
pub fn attempt(took: Duration) {
    metrics::histogram!("paysaga_webhook_attempt_seconds").record(took.as_secs_f64());
}

/// The age of the oldest event not yet delivered, the DEAD deliveries and the
/// PENDING ones (refreshed by the delivery worker's census).
pub fn census(c: &crate::store::Census) {
    metrics::gauge!("paysaga_outbox_lag_seconds").set(c.lag_seconds);
    metrics::gauge!("paysaga_webhook_dead_deliveries").set(c.dead as f64);
    metrics::gauge!("paysaga_webhook_pending_deliveries").set(c.pending as f64);
}

/// Events taken in from a service's outbox (new ones only), by `source` (`order`,
/// `member`).
pub fn ingested(source: crate::ingest::Source, n: u64) {
    metrics::counter!("paysaga_events_ingested_total", "source" => source.as_str()).increment(n);
}
