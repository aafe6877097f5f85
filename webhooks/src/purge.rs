//! The purge of old events: every instance deletes events past `EVENT_RETENTION_HOURS`
//! with their settled deliveries, in bounded batches.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use paysaga_common::jobs::Jobs;
use sqlx::PgPool;

use crate::{config::WebhookConfig, store};

/// Events (and their deliveries) deleted per purge statement; a run repeats while full.
const PURGE_BATCH: i64 = 1000;
/// Purge statements per run at most.
const PURGE_MAX_BATCHES: u32 = 20;

/// Schedules the purge of events older than `EVENT_RETENTION_HOURS`, every
/// `EVENT_PURGE_INTERVAL_MS`. Every instance runs it; `SKIP LOCKED` keeps them apart.
pub async fn schedule(
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
                        tracing::warn!(error = %paysaga_common::error::cause_chain(&e), "event purge failed; the next run retries");
                        return;
                    }
                }
            }
        }
    })
    .await?;
    Ok(())
}
