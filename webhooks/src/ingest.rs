//! The order service's events coming in: a job pulls its outbox (`GET /v1/events`),
//! inserts the events into the event log (each id once) and commits, then acknowledges
//! them (`POST /v1/events/ack`). A crash between the two pulls the same events again
//! and the insert skips them; several instances may pull at once for the same reason.

use std::sync::{atomic::Ordering, Arc};

use paysaga_common::jobs::Jobs;
use paysaga_contracts::{order::api::AckEvents, OrderClient};
use sqlx::PgPool;

use crate::{
    config::WebhookConfig,
    error::{Error, Result},
    metrics, store,
};

/// Pulls per run at most: a run drains a backlog of this many pages, the next run the rest.
const MAX_PAGES: u32 = 20;

/// One pull-insert-ack round; returns how many events the page had.
#[tracing::instrument(skip_all)]
pub async fn pull_once(pool: &PgPool, order: &OrderClient, limit: u32) -> Result<usize> {
    let page = order.outbox(limit).await.map_err(Error::Outbox)?.body;
    if page.events.is_empty() {
        return Ok(0);
    }
    let mut seen = std::collections::HashSet::new();
    let incoming: Vec<store::Incoming> = page
        .events
        .iter()
        .filter(|e| seen.insert(e.id))
        .map(|e| store::Incoming {
            id: e.id,
            event_type: e.kind.clone(),
            subject: e.subject.clone(),
            data: e.data.clone(),
            occurred_at: e.occurred_at,
        })
        .collect();
    // Committed before the ack: an event is acknowledged only once it is ours.
    let new = store::ingest(pool, &incoming).await?;
    metrics::ingested(new);
    let ids = incoming.iter().map(|e| e.id).collect();
    order
        .ack_outbox(&AckEvents { ids })
        .await
        .map_err(Error::Outbox)?;
    if new > 0 {
        tracing::debug!(pulled = page.events.len(), new, "order events taken in");
    }
    Ok(page.events.len())
}

/// Schedules the ingest job on `jobs`: every `WEBHOOK_INGEST_INTERVAL_MS`, pages of
/// `WEBHOOK_INGEST_BATCH` until one comes back short (at most [`MAX_PAGES`] per run).
pub async fn schedule(
    jobs: &Jobs,
    pool: PgPool,
    order: OrderClient,
    config: &WebhookConfig,
    alive: Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<()> {
    let limit = config.ingest_batch;
    let order = Arc::new(order);
    jobs.every("event_ingest", config.ingest_interval, move || {
        let (pool, order, alive) = (pool.clone(), order.clone(), alive.clone());
        async move {
            for _ in 0..MAX_PAGES {
                if !alive.load(Ordering::Acquire) {
                    return;
                }
                match pull_once(&pool, &order, limit).await {
                    Ok(n) if n < limit as usize => return,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %paysaga_common::error::cause_chain(&e), "pulling the order service's events failed; the next run retries");
                        return;
                    }
                }
            }
        }
    })
    .await?;
    Ok(())
}
