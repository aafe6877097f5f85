//! Holds given back. Two jobs, on every instance:
//!
//! - the drain: a cancelled reservation owes its hold's release, written as a row of
//!   `hold_releases` in the transaction that returned the unit (a trigger on every
//!   path that cancels). The rows owed are sent to the account service, by the hold's
//!   key, as one batch, and marked once it has answered; an unknown answer leaves the
//!   row owed for the next run. A release is once per key, so two instances sending
//!   the same one, or a resend after a crash, change nothing.
//! - the reconciliation: a hold placed for a reservation that was never made (the
//!   order service died between hold and claim, or lost the answer, or lost the
//!   release of a claim that got no unit) is found among the account service's live
//!   holds once it is older than the orphan grace, and released. Each instance walks
//!   the live holds once, oldest first, with a cursor; a claim is refused after a third
//!   of the grace ([`crate::funds`]), so no hold is released under a claim in flight.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use paysaga_common::jobs::Jobs;
use paysaga_contracts::{
    account::api::{HoldCursor, ListHolds},
    order::api::{hold_key, reservation_of_hold},
};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    error::{Error, Result},
    funds::{Funds, Released},
    states::Text,
};
use paysaga_contracts::order::api::ReservationState;

/// Releases one drain run sends at most.
const DRAIN_BATCH: i64 = 500;
/// Pages of live holds one reconciliation run reads at most.
const RECONCILE_PAGES: usize = 20;
const RECONCILE_PAGE: i64 = 500;

/// Sends the releases cancels owe (up to [`DRAIN_BATCH`]); returns how many were
/// settled.
#[tracing::instrument(skip_all)]
pub async fn drain(pool: &PgPool, funds: &Funds) -> Result<u64> {
    let owed: Vec<Uuid> = sqlx::query_scalar(
        r#"
        SELECT reservation_id
        FROM hold_releases
        WHERE released_at IS NULL
        ORDER BY created_at
        LIMIT $1
        "#,
    )
    .bind(DRAIN_BATCH)
    .fetch_all(pool)
    .await?;
    metrics::gauge!("order_hold_releases_owed").set(owed.len() as f64);
    if owed.is_empty() {
        return Ok(0);
    }
    let answers = futures::future::join_all(owed.iter().map(|id| {
        let key = hold_key(*id);
        async move { funds.release(&key).await }
    }))
    .await;
    let mut settled = Vec::with_capacity(owed.len());
    for (id, answer) in owed.iter().zip(answers) {
        match answer {
            Ok(how) => {
                count_release(how);
                settled.push(*id);
            }
            Err(e) => {
                tracing::debug!(reservation_id = %id, error = %e, "hold release unanswered; sent again next run")
            }
        }
    }
    sqlx::query(
        r#"
        UPDATE hold_releases
        SET released_at = now()
        WHERE reservation_id = ANY($1) AND released_at IS NULL
        "#,
    )
    .bind(&settled)
    .execute(pool)
    .await?;
    Ok(settled.len() as u64)
}

fn count_release(how: Released) {
    let outcome = match how {
        Released::Released => "released",
        Released::Captured => "captured_first",
        Released::NeverHeld => "never_held",
    };
    metrics::counter!("order_hold_releases_total", "outcome" => outcome).increment(1);
}

/// Where this instance's reconciliation left off in the account service's live holds.
#[derive(Debug, Clone, Default)]
pub struct Cursor(Arc<Mutex<Option<HoldCursor>>>);

impl Cursor {
    fn get(&self) -> Option<HoldCursor> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn set(&self, c: HoldCursor) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
    }
}

/// Releases the holds older than the grace whose reservation was never made (or has
/// ended without its release); returns how many. Reads the live holds after `cursor`
/// and moves it on.
#[tracing::instrument(skip_all)]
pub async fn reconcile(pool: &PgPool, funds: &Funds, cursor: &Cursor) -> Result<u64> {
    let mut released = 0;
    for _ in 0..RECONCILE_PAGES {
        let after = cursor.get();
        let q = ListHolds {
            older_than_ms: u64::try_from(funds.grace().as_millis()).unwrap_or(u64::MAX),
            after_created_at: after.map(|c| c.created_at),
            after_id: after.map(|c| c.id),
            limit: Some(RECONCILE_PAGE),
        };
        let page = funds.list(&q).await.map_err(Error::Funds)?;
        let ids: Vec<Uuid> = page
            .holds
            .iter()
            .filter_map(|h| reservation_of_hold(&h.operation_key))
            .collect();
        let states: HashMap<Uuid, ReservationState> =
            sqlx::query_as::<_, (Uuid, Text<ReservationState>)>(
                r#"SELECT id, state FROM reservations WHERE id = ANY($1)"#,
            )
            .bind(&ids)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|(id, Text(state))| (id, state))
            .collect();
        for id in ids {
            match states.get(&id) {
                Some(ReservationState::Reserved) => {}
                Some(ReservationState::Confirmed) => {
                    // A confirmed reservation was paid: its hold must have been captured.
                    tracing::error!(reservation_id = %id, "a confirmed reservation's hold is still held");
                }
                // Never made, or ended (cancelled: its drain may not have run yet;
                // expired: lapsed by now): the money is owed back.
                None | Some(ReservationState::Cancelled | ReservationState::Expired) => {
                    let key = hold_key(id);
                    match funds.release(&key).await {
                        Ok(_) => {
                            released += 1;
                            tracing::info!(hold = %key, "released a hold no live reservation uses");
                        }
                        // Left behind the cursor: the hold lapses at its deadline.
                        Err(e) => {
                            tracing::warn!(hold = %key, error = %e, "could not release an orphaned hold")
                        }
                    }
                }
            }
        }
        if let Some(last) = page.holds.last() {
            cursor.set(HoldCursor {
                created_at: last.created_at,
                id: last.id,
            });
        }
        if page.next.is_none() {
            break;
        }
    }
    if released > 0 {
        metrics::counter!("order_holds_total", "outcome" => "orphan_released").increment(released);
    }
    Ok(released)
}

/// Schedules among `jobs` the drain every `interval`, and the reconciliation every third
/// of the orphan grace.
pub async fn schedule(
    jobs: &Jobs,
    pool: PgPool,
    funds: Funds,
    interval: Duration,
) -> anyhow::Result<()> {
    let (drain_pool, drain_funds) = (pool.clone(), funds.clone());
    jobs.every("hold_release", interval, move || {
        let (pool, funds) = (drain_pool.clone(), drain_funds.clone());
        async move {
            if let Err(e) = drain(&pool, &funds).await {
                metrics::counter!("order_hold_release_errors_total").increment(1);
                tracing::warn!(error = %e, "hold release run failed; the next run retries");
            }
        }
    })
    .await?;
    let cursor = Cursor::default();
    let every = (funds.grace() / 3).max(Duration::from_millis(100));
    jobs.every("hold_reconcile", every, move || {
        let (pool, funds, cursor) = (pool.clone(), funds.clone(), cursor.clone());
        async move {
            if let Err(e) = reconcile(&pool, &funds, &cursor).await {
                metrics::counter!("order_hold_release_errors_total").increment(1);
                tracing::warn!(error = %e, "hold reconciliation failed; the next run retries");
            }
        }
    })
    .await?;
    Ok(())
}
