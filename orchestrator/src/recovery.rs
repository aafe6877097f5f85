//! Scheduled jobs: recovery claims due payments in bounded batches and drives them;
//! the purge drops idempotency records past their retention.

use std::{
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use futures::StreamExt;
use paysaga_common::{error::cause_chain, jobs::Jobs, telemetry};
use tracing::Instrument;

use crate::{driver::Engine, error::Result, idempotency, metrics, store};

/// Settings of the recovery job.
#[derive(Debug, Clone, Copy)]
pub struct RecoveryPolicy {
    pub interval: Duration,
    pub batch: i64,
    pub max_batches: u32,
    pub concurrency: usize,
}

/// One recovery run: claim up to `batch` due payments at a time (at most
/// `max_batches` times) and drive them, `concurrency` at once. Returns how many
/// were claimed.
#[tracing::instrument(skip_all)]
pub async fn recover(engine: &Arc<Engine>, policy: RecoveryPolicy) -> Result<usize> {
    let mut total = 0;
    for _ in 0..policy.max_batches {
        if !engine.alive.load(Ordering::Acquire) {
            break;
        }
        let claimed =
            store::claim_due(&engine.pool, engine.instance, engine.lease, policy.batch).await?;
        let n = claimed.len();
        total += n;
        metrics::recovered(n);
        futures::stream::iter(claimed)
            .for_each_concurrent(policy.concurrency, |row| {
                let engine = engine.clone();
                // Recovery continues the trace of the request that created the
                // payment, so a step run after a crash shows in the buyer's trace.
                let span = tracing::info_span!(
                    "recover payment",
                    payment_id = %row.id,
                    trace_id = tracing::field::Empty,
                );
                telemetry::continue_trace(&span, row.traceparent.as_deref());
                async move {
                    let id = row.id;
                    if let Err(e) = engine.drive(row).await {
                        tracing::warn!(payment_id = %id, error = %cause_chain(&e), "recovery could not drive payment; its lease expires and it is retried");
                    }
                }
                .instrument(span)
            })
            .await;
        if i64::try_from(n).unwrap_or(i64::MAX) < policy.batch {
            break;
        }
    }
    if total > 0 {
        tracing::info!(claimed = total, "recovery run");
    }
    Ok(total)
}

/// Starts the recovery and purge jobs (see `paysaga_common::jobs`). A run still going when the next is due is not doubled:
/// that tick is skipped. Neither runs once the instance has stopped.
pub async fn start(
    engine: Arc<Engine>,
    policy: RecoveryPolicy,
    purge_interval: Duration,
) -> anyhow::Result<Jobs> {
    let jobs = Jobs::start().await?;

    let recovery_engine = engine.clone();
    jobs.every("recovery", policy.interval, move || {
        let engine = recovery_engine.clone();
        async move {
            if !engine.alive.load(Ordering::Acquire) {
                return;
            }
            if let Err(e) = recover(&engine, policy).await {
                metrics::counter_recovery_error();
                tracing::warn!(error = %cause_chain(&e), "recovery run failed; the next run retries");
            }
            match store::census(&engine.pool).await {
                Ok(census) => metrics::census(&census),
                Err(e) => tracing::debug!(error = %cause_chain(&e), "census failed"),
            }
        }
    })
    .await?;

    jobs.every("idempotency_purge", purge_interval, move || {
        let engine = engine.clone();
        async move {
            if !engine.alive.load(Ordering::Acquire) {
                return;
            }
            match idempotency::purge_expired(&engine.pool, 1000).await {
                Ok(n) if n > 0 => tracing::info!(purged = n, "expired idempotency keys purged"),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %cause_chain(&e), "idempotency purge failed; the next run retries")
                }
            }
        }
    })
    .await?;

    Ok(jobs)
}
