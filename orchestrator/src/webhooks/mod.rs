//! Events and signed webhooks (docs/events.md): the event log (payment events written by
//! a trigger in the payment's own transaction, order events pulled from the order
//! service's outbox), endpoints, and the delivery worker every instance runs.

pub mod ingest;
pub mod openapi;
pub mod store;
pub mod worker;

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use paysaga_common::jobs::Jobs;
use sqlx::PgPool;

use crate::config::WebhookConfig;

pub use worker::backoff;

/// Events (and their deliveries) deleted per purge statement; a run repeats while full.
const PURGE_BATCH: i64 = 1000;
/// Purge statements per run at most.
const PURGE_MAX_BATCHES: u32 = 20;

/// Schedules the purge of events older than `EVENT_RETENTION_HOURS`, every
/// `EVENT_PURGE_INTERVAL_MS`. Every instance runs it; `SKIP LOCKED` keeps them apart.
pub async fn schedule_purge(
    jobs: &Jobs,
    pool: PgPool,
    config: &WebhookConfig,
    alive: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let retention = Duration::from_secs(u64::try_from(config.retention_hours).unwrap_or(1) * 3600);
    jobs.every("event_purge", config.purge_interval, move || {
        let (pool, alive) = (pool.clone(), alive.clone());
        async move {
            for _ in 0..PURGE_MAX_BATCHES {
                if !alive.load(Ordering::Acquire) {
                    return;
                }
                match store::purge(&pool, retention, PURGE_BATCH).await {
                    Ok((deliveries, events)) => {
                        if events > 0 {
                            tracing::info!(events, deliveries, "old events purged");
                        }
                        if events < PURGE_BATCH {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "event purge failed; the next run retries");
                        return;
                    }
                }
            }
        }
    })
    .await?;
    Ok(())
}

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

    /// The age of the oldest event not yet delivered, the DEAD deliveries and the
    /// PENDING ones (refreshed by the delivery worker's census).
    pub fn census(c: &super::store::Census) {
        metrics::gauge!("paysaga_outbox_lag_seconds").set(c.lag_seconds);
        metrics::gauge!("paysaga_webhook_dead_deliveries").set(c.dead as f64);
        metrics::gauge!("paysaga_webhook_pending_deliveries").set(c.pending as f64);
    }

    /// Events taken in from the order service's outbox (new ones only).
    pub fn ingested(n: u64) {
        metrics::counter!("paysaga_events_ingested_total").increment(n);
    }
}
