//! The expiry sweeps: reservations past their deadline give their units back (to the
//! head of the product's waitlist, else on sale), and offers past theirs pass their
//! units on; both in bounded batches that several instances can run at once.

use std::time::{Duration, Instant};

use paysaga_common::jobs::Jobs;
use sqlx::PgPool;

use crate::error::{Error, Result};

/// Expires up to `batch` due reservations in one transaction and returns how many units
/// came back (each offered to the head of its product's waitlist by the handoff
/// trigger, in this transaction, or else on sale). Rows are claimed with `SKIP LOCKED`: a reservation being
/// confirmed or cancelled right now, or swept by another instance, is left to them.
#[tracing::instrument(skip_all, fields(batch))]
pub async fn sweep_batch(pool: &PgPool, batch: i64) -> Result<u64> {
    let mut tx = pool.begin().await?;
    let (expired, released, offered): (i64, i64, i64) = sqlx::query_as(
        r#"
        WITH due AS (
            SELECT id
            FROM reservations
            WHERE state = 'RESERVED' AND expires_at <= now()
            ORDER BY expires_at
            LIMIT $1
            FOR UPDATE SKIP LOCKED
        ), expired AS (
            UPDATE reservations r
            SET state = 'EXPIRED', updated_at = now()
            FROM due
            WHERE r.id = due.id
            RETURNING r.unit_id
        ), released AS (
            UPDATE product_stock s
            SET state = 'AVAILABLE', updated_at = now()
            FROM expired
            WHERE s.id = expired.unit_id AND s.state = 'RESERVED'
            RETURNING s.id, s.state
        )
        SELECT (SELECT COUNT(*) FROM expired), (SELECT COUNT(*) FROM released),
               (SELECT COUNT(*) FROM released WHERE state = 'OFFERED')
        "#,
    )
    .bind(batch)
    .fetch_one(&mut *tx)
    .await?;
    if expired != released {
        // Dropping the transaction rolls the batch back: nothing half-done is kept.
        return Err(Error::Invariant(format!(
            "sweep expired {expired} reservations but released {released} units"
        )));
    }
    tx.commit().await?;
    crate::waitlist::count_handoffs(std::iter::repeat_n(
        "OFFERED",
        usize::try_from(offered).unwrap_or(0),
    ));
    let released = u64::try_from(released).unwrap_or(0);
    metrics::counter!("order_units_returned_total", "reason" => "expired").increment(released);
    Ok(released)
}

/// One sweep run: batches until one comes back short, at most `max_batches` of them, so
/// a backlog is worked off over several runs instead of one unbounded one.
pub async fn sweep(pool: &PgPool, batch: i64, max_batches: u32) -> Result<u64> {
    let start = Instant::now();
    let mut total = 0;
    for _ in 0..max_batches {
        let n = sweep_batch(pool, batch).await?;
        total += n;
        if n < u64::try_from(batch).unwrap_or(u64::MAX) {
            break;
        }
    }
    metrics::histogram!("order_sweep_seconds").record(start.elapsed().as_secs_f64());
    if total > 0 {
        tracing::info!(units_returned = total, "expired reservations swept");
    }
    Ok(total)
}

/// Schedules the sweeps every `interval` (whole seconds; see `paysaga_common::jobs`):
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
            match crate::outbox::lag_seconds(&pool).await {
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
