//! The expiry sweeps, scheduled: reservations past their deadline give their units back
//! (to the head of the product's waitlist, else on sale), and offers past theirs pass
//! their units on; both in bounded batches that several instances can run at once.

use std::time::Duration;

use paysaga_common::jobs::{self, Jobs};
use sqlx::PgPool;

use crate::error::Result;

/// Expires up to `batch` due reservations, one statement (the confirm and cancel rule's,
/// [`crate::settle::sweep`]), and returns how many units came back (each offered to the
/// head of its product's waitlist by the handoff trigger, in that statement, or else on
/// sale).
pub async fn sweep_batch(pool: &PgPool, batch: i64) -> Result<u64> {
    crate::settle::sweep(pool, batch).await
}

/// One sweep run: batches until one comes back short, at most `max_batches` of them, so
/// a backlog is worked off over several runs instead of one unbounded one.
pub async fn sweep(pool: &PgPool, batch: i64, max_batches: u32) -> Result<u64> {
    let total = jobs::timed_in_batches("order_sweep_seconds", batch, max_batches, || {
        sweep_batch(pool, batch)
    })
    .await?;
    if total > 0 {
        tracing::info!(units_returned = total, "expired reservations swept");
    }
    Ok(total)
}

/// Schedules the sweeps every `interval` (see `paysaga_common::jobs`):
/// reservations (then the outbox lag gauge) and, beside them, waitlist offers. A run
/// still going when the next is due is not doubled: the later tick is skipped.
pub async fn start(
    pool: PgPool,
    interval: Duration,
    batch: i64,
    max_batches: u32,
) -> anyhow::Result<Jobs> {
    let jobs = Jobs::start().await?;
    let offers_pool = pool.clone();
    jobs.every("expiry_sweep", interval, move || {
        let pool = pool.clone();
        async move {
            if let Err(e) = sweep(&pool, batch, max_batches).await {
                metrics::counter!("order_sweep_errors_total").increment(1);
                tracing::warn!(error = %e, "expiry sweep failed; the next run retries");
            }
            // The outbox gauge rides on this job: one indexed read per run.
            match paysaga_common::outbox::lag_seconds(&pool).await {
                Ok(lag) => metrics::gauge!("order_outbox_lag_seconds").set(lag),
                Err(e) => tracing::debug!(error = %e, "outbox lag unavailable"),
            }
        }
    })
    .await?;
    jobs.every("offer_sweep", interval, move || {
        let pool = offers_pool.clone();
        async move {
            if let Err(e) = crate::waitlist::sweep(&pool, batch, max_batches).await {
                metrics::counter!("order_sweep_errors_total").increment(1);
                tracing::warn!(error = %e, "offer sweep failed; the next run retries");
            }
        }
    })
    .await?;
    Ok(jobs)
}
