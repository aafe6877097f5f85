//! Other services' events coming in: a job pulls each source's outbox (`GET
//! /v1/events`: the order service's and the member service's), inserts the events into
//! the event log (each id once, under its `source`) and commits, then acknowledges them
//! (`POST /v1/events/ack`). A crash between the two pulls the same events again and the
//! insert skips them; several instances may pull at once for the same reason.

use std::sync::{atomic::Ordering, Arc};

use paysaga_common::jobs::Jobs;
use paysaga_contracts::outbox::{AckEvents, OutboxClient};
use sqlx::PgPool;

use crate::{
    config::WebhookConfig,
    error::{Error, Result},
    metrics, store,
};

/// Pulls per run at most: a run drains a backlog of this many pages, the next run the rest.
const MAX_PAGES: u32 = 20;

/// A service whose outbox is pulled: the `source` its events are recorded under
/// (CHECK `events_source_known`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Order,
    Member,
}

impl Source {
    pub const fn as_str(self) -> &'static str {
        match self {
            Source::Order => "order",
            Source::Member => "member",
        }
    }
}

/// One source's outbox, and whom it belongs to.
#[derive(Debug, Clone)]
pub struct Puller {
    pub source: Source,
    pub outbox: OutboxClient,
}

/// One pull-insert-ack round of `from`; returns how many events the page had.
#[tracing::instrument(skip_all, fields(source = from.source.as_str()))]
pub async fn pull_once(pool: &PgPool, from: &Puller, limit: u32) -> Result<usize> {
    let page = from
        .outbox
        .pending(limit)
        .await
        .map_err(Error::Outbox)?
        .body;
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
    let new = store::ingest(pool, from.source, &incoming).await?;
    metrics::ingested(from.source, new);
    let ids = incoming.iter().map(|e| e.id).collect();
    from.outbox
        .ack(&AckEvents { ids })
        .await
        .map_err(Error::Outbox)?;
    if new > 0 {
        tracing::debug!(pulled = page.events.len(), new, "events taken in");
    }
    Ok(page.events.len())
}

/// Schedules one ingest job per source on `jobs` (one source's outage does not hold up
/// another's): every `WEBHOOK_INGEST_INTERVAL_MS`, pages of `WEBHOOK_INGEST_BATCH` until
/// one comes back short (at most [`MAX_PAGES`] per run).
pub async fn schedule(
    jobs: &Jobs,
    pool: PgPool,
    sources: Vec<Puller>,
    config: &WebhookConfig,
    alive: Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<()> {
    let limit = config.ingest_batch;
    for from in sources {
        let name = match from.source {
            Source::Order => "event_ingest",
            Source::Member => "event_ingest_member",
        };
        let from = Arc::new(from);
        let (pool, alive) = (pool.clone(), alive.clone());
        jobs.every(name, config.ingest_interval, move || {
            let (pool, from, alive) = (pool.clone(), from.clone(), alive.clone());
            async move {
                for _ in 0..MAX_PAGES {
                    if !alive.load(Ordering::Acquire) {
                        return;
                    }
                    match pull_once(&pool, &from, limit).await {
                        Ok(n) if n < limit as usize => return,
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(source = from.source.as_str(), error = %paysaga_common::error::cause_chain(&e), "pulling a service's events failed; the next run retries");
                            return;
                        }
                    }
                }
            }
        })
        .await?;
    }
    Ok(())
}
