//! Scenario 10: the PostgreSQL primary lost mid-drop. The services reach PostgreSQL
//! through HAProxy in front of a primary and its synchronous streaming standby of the
//! scenario's own (`paysaga_e2e::postgres_ha`), HAProxy keeping only the node that is not
//! in recovery in rotation. While payments are in flight (aimed at a moment when one of
//! the orchestrator's batches is, so commits are in flight on the primary) the primary's
//! postmaster and backends are SIGKILLed together; after `fault_for` (the time a
//! failover manager takes to decide) the standby is promoted, HAProxy's check puts it in
//! rotation, and the services' pools reconnect to it on their own. A probe buyer checks
//! out from the moment of the kill, to time when the system sells again.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use paysaga_drop::{Buyer, Driver, Outcome, Patience};
use paysaga_e2e::postgres_ha::Role;

use super::{Aim, Aimed, Ctx, Injection, OPS_AT_KILLS};
use crate::scenario::PRIMARIES_FAILED_OVER;

/// How long HAProxy may take to put the promoted standby in rotation.
const ROUTE_WAIT: Duration = Duration::from_secs(30);

/// Checkouts by buyers of a product of their own, made one after another from the kill
/// until one completes: the first sale after the failover.
#[derive(Debug, Clone)]
pub struct Probe {
    pub driver: Driver,
    pub buyers: Vec<Buyer>,
    pub product: i64,
}

impl Probe {
    /// Retries an unknown outcome every 128 ms at most (backoff 2 ms, doubled, capped by
    /// the driver at 64x), so the first checkout after the failover is timed to within
    /// about that; enough retries for a minute of outage.
    pub fn patience() -> Patience {
        Patience {
            retries: 600,
            backoff: Duration::from_millis(2),
            poll: Duration::from_millis(20),
            follow_for: Duration::from_secs(60),
        }
    }

    /// When the first of the buyers' checkouts completed, or `None` if none did.
    async fn first_checkout(self) -> Option<Instant> {
        for buyer in &self.buyers {
            let attempt = self.driver.buy(buyer, self.product).await;
            if attempt.outcome == Outcome::Completed {
                return Some(Instant::now());
            }
            tracing::warn!(outcome = ?attempt.outcome, "probe checkout did not complete");
        }
        None
    }
}

const IN_FLIGHT: [&str; 3] = ["PROCESSING", "ACCOUNT_DEBITED", "ORDER_CONFIRMED"];

/// Payments so far: made, COMPLETED, not terminal.
async fn census(ctx: &Ctx<'_>) -> anyhow::Result<(i64, i64, i64)> {
    sqlx::query_as(
        r#"
        SELECT COUNT(*),
               COUNT(*) FILTER (WHERE state = 'COMPLETED'),
               COUNT(*) FILTER (WHERE state NOT IN ('COMPLETED', 'FAILED', 'REFUNDED'))
        FROM payment_service.payments
        "#,
    )
    .fetch_one(&ctx.pool)
    .await
    .context("counting payments")
}

pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    // Strike once some buyers have been told COMPLETED (a fifth of the units paid for),
    // so the new primary must hold acknowledged payments too, not only the set-up.
    let paid_first = ctx.plan.units / 5;
    while !ctx.drop_over() {
        let (_, completed, unfinished) = census(ctx).await?;
        if completed >= paid_first && unfinished > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut exported = false;
    let Aimed { ops } = ctx.aim(&IN_FLIGHT, Aim::AnyBatch, &mut exported).await?;
    // Read before the kill: afterwards there is no database to read until the failover.
    let (payments, completed, unfinished) = census(ctx).await?;
    // Mid-drop: buyers still waiting for their answers when the primary dies.
    let mid_drop = !ctx.drop_over();
    let probe = ctx
        .probe
        .clone()
        .context("the postgres-failover scenario has a probe buyer")?;
    let fault_for = ctx.plan.fault_for;
    let ha = ctx
        .postgres
        .as_deref_mut()
        .context("the postgres-failover scenario runs on its own PostgreSQL pair")?;

    let killed_at = Instant::now();
    ha.kill_primary();
    let first_checkout = tokio::spawn(probe.first_checkout());
    // The failover manager's decision time: the primary stays dead, nothing is writable.
    tokio::time::sleep(fault_for).await;
    ha.promote_standby().await?;
    let promoted_at = Instant::now();
    ha.wait_routed_to(Role::Standby, ROUTE_WAIT).await?;
    let routed_at = Instant::now();
    let first_checkout = first_checkout
        .await
        .context("the probe checkout's task failed")?;

    let ms = |from: Instant, to: Instant| {
        i64::try_from(to.saturating_duration_since(from).as_millis()).unwrap_or(i64::MAX)
    };
    let mut evidence = vec![
        (PRIMARIES_FAILED_OVER.into(), i64::from(mid_drop)),
        ("payments unfinished at the kill".into(), unfinished),
        ("payments made before the kill".into(), payments),
        ("payments COMPLETED before the kill".into(), completed),
        (OPS_AT_KILLS.into(), ops as i64),
        (
            "SIGKILL to standby promoted (ms)".into(),
            ms(killed_at, promoted_at),
        ),
        (
            "SIGKILL to HAProxy routing to the new primary (ms)".into(),
            ms(killed_at, routed_at),
        ),
        (
            "promotion to HAProxy routing to it (ms)".into(),
            ms(promoted_at, routed_at),
        ),
    ];
    match first_checkout {
        Some(at) => {
            evidence.push((
                "SIGKILL to first checkout completed (ms)".into(),
                ms(killed_at, at),
            ));
            evidence.push((
                "promotion to first checkout completed (ms)".into(),
                ms(promoted_at, at),
            ));
        }
        None => evidence.push((super::PROBE_FAILED.into(), 1)),
    }
    Ok(Injection {
        faults: 1,
        evidence,
        struck_at: Some(killed_at),
        healed_at: Some(routed_at),
    })
}
