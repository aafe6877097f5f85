//! Scenarios 10 and 11: the PostgreSQL primary lost mid-drop, twice. The services reach
//! PostgreSQL through HAProxy in front of two nodes Patroni manages over etcd in
//! synchronous mode (`paysaga_e2e::postgres_ha`), HAProxy routing to the node whose
//! Patroni answers `/primary`. The drop's buyers arrive in waves; while one wave is
//! paying (aimed at a moment when one of the orchestrator's batches is in flight, so
//! commits are in flight on the primary) the primary is struck: every process of it
//! SIGKILLed (`postgres-failover`), or cut off the network (`postgres-partition`).
//! Nothing here promotes: Patroni's leader key expires, the synchronous standby takes
//! it and promotes itself, HAProxy follows. Then the fault ends (the killed node is
//! started again, as its supervisor would; the cut heals), the old primary rejoins as
//! a replica by pg_rewind and becomes the synchronous standby, the next wave comes in,
//! and the next strike hits the new primary: the second failover goes to the node that
//! rejoined. A probe buyer checks out from each strike on, to time when the system
//! sells again.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use paysaga_drop::{Attempt, Buyer, Driver, Outcome, Patience};
use sqlx::PgPool;

use super::{Aim, Aimed, Ctx, Injection, LOST_IN_FAILOVER, OPS_AT_KILLS, PROBE_FAILED};
use crate::{
    evidence,
    scenario::{PrimaryFault, Scenario, PRIMARIES_FAILED_OVER},
    settle,
    waves::Waves,
};

/// How long Patroni may take to promote the standby (its leader key lives
/// `postgres_ha::TTL_SECS` after the last renewal; the rest is slack for a busy machine).
const FAILOVER_WAIT: Duration = Duration::from_secs(60);
/// How long HAProxy may take to route to the new primary once it is writable.
const ROUTE_WAIT: Duration = Duration::from_secs(30);
/// How long the old primary may take to rejoin as the synchronous standby (Patroni's
/// crash recovery or demotion, pg_rewind, catching up).
const REJOIN_WAIT: Duration = Duration::from_secs(180);
/// How long a wave may take to be paying before its strike goes ahead anyway.
const WAVE_WAIT: Duration = Duration::from_secs(30);
/// How long a read of the database may keep failing right after a failover (pools
/// reconnecting through HAProxy).
const READ_WAIT: Duration = Duration::from_secs(30);

/// Checkouts by buyers of a product of their own, made one after another from a strike
/// until one completes: the first sale after the failover.
#[derive(Debug, Clone)]
pub struct Probe {
    pub driver: Driver,
    /// [`Probe::PER_FAILOVER`] buyers for each failover, in order.
    pub buyers: Vec<Buyer>,
    pub product: i64,
}

impl Probe {
    /// Buyers (and units) of the probe per failover.
    pub const PER_FAILOVER: usize = 3;

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

    /// When the first of failover `nth`'s buyers' checkouts completed, or `None` if none
    /// did.
    async fn first_checkout(self, nth: usize) -> Option<Instant> {
        let mine = self
            .buyers
            .iter()
            .skip(nth * Self::PER_FAILOVER)
            .take(Self::PER_FAILOVER);
        for buyer in mine {
            let attempt = self.driver.buy(buyer, self.product).await;
            if attempt.outcome == Outcome::Completed {
                return Some(Instant::now());
            }
            tracing::warn!(outcome = ?attempt.outcome, "probe checkout did not complete");
        }
        None
    }
}

/// One failover, as measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Failover {
    /// 1 for the first failover of the drop, 2 for the second (to the rejoined node).
    pub nth: u32,
    pub fault: PrimaryFault,
    /// The Patroni node struck, and the one Patroni promoted.
    pub from: String,
    pub to: String,
    /// Payments not terminal just before the strike.
    pub unfinished_at_fault: i64,
    /// Payments COMPLETED on the old primary just before the strike.
    pub completed_at_fault: i64,
    /// Operations in flight in the orchestrator's batches at the last read before it.
    pub batch_ops_at_fault: i64,
    /// From the strike until Patroni's new leader accepted writes.
    pub to_new_primary: Duration,
    /// From the strike until HAProxy routed new connections to it.
    pub to_routed: Duration,
    /// From the strike until a probe checkout completed (`None`: none did).
    pub to_first_checkout: Option<Duration>,
    /// From the strike until every buyer let in had an answer and every payment was
    /// terminal (`None`: not within the recovery bound).
    pub to_all_terminal: Option<Duration>,
    /// Buyers' requests with an unknown outcome (5xx, cut connection, timeout) from the
    /// strike until every payment was terminal.
    pub unknown_outcomes: usize,
    /// Answers buyers had before the strike, and payments the old primary had
    /// COMPLETED, missing on the new primary: must be 0.
    pub lost: i64,
    /// From the end of the fault (restart, heal) until the old primary was streaming as
    /// the new one's synchronous standby.
    pub to_rejoined: Duration,
    /// PostgreSQL's timeline after the failover.
    pub timeline: i64,
}

const IN_FLIGHT: [&str; 3] = ["PROCESSING", "ACCOUNT_DEBITED", "ORDER_CONFIRMED"];

/// The payments just before a strike.
struct Census {
    payments: i64,
    unfinished: i64,
    completed: Vec<uuid::Uuid>,
}

/// Payments COMPLETED and payments not terminal, right now.
async fn counts(pool: &PgPool) -> anyhow::Result<(i64, i64)> {
    sqlx::query_as(
        r#"
        SELECT COUNT(*) FILTER (WHERE state = 'COMPLETED'),
               COUNT(*) FILTER (WHERE state NOT IN ('COMPLETED', 'FAILED', 'REFUNDED'))
        FROM payment_service.payments
        "#,
    )
    .fetch_one(pool)
    .await
    .context("counting payments")
}

async fn census(pool: &PgPool) -> anyhow::Result<Census> {
    let (payments, unfinished): (i64, i64) = sqlx::query_as(
        r#"
        SELECT COUNT(*),
               COUNT(*) FILTER (WHERE state NOT IN ('COMPLETED', 'FAILED', 'REFUNDED'))
        FROM payment_service.payments
        "#,
    )
    .fetch_one(pool)
    .await
    .context("counting payments")?;
    let completed =
        sqlx::query_scalar(r#"SELECT id FROM payment_service.payments WHERE state = 'COMPLETED'"#)
            .fetch_all(pool)
            .await
            .context("listing COMPLETED payments")?;
    Ok(Census {
        payments,
        unfinished,
        completed,
    })
}

/// Retries `read` until it succeeds or [`READ_WAIT`] passes: the first reads after a
/// failover may meet connections the failover broke.
async fn read_retrying<T>(mut read: impl AsyncFnMut() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let deadline = Instant::now() + READ_WAIT;
    loop {
        match read().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// What the new primary lacks of what was acknowledged before the strike: buyers'
/// answers (COMPLETED with its debit and order, FAILED, REFUNDED, reservations given)
/// and payments the old primary had COMPLETED.
async fn lost_in_failover(
    pool: &PgPool,
    answered: &[Attempt],
    completed: &[uuid::Uuid],
) -> anyhow::Result<i64> {
    let told = evidence::acknowledged(pool, answered).await?;
    let gone: i64 = sqlx::query_scalar(
        r#"
        SELECT COUNT(*)
        FROM UNNEST($1::UUID[]) AS before(id)
        LEFT JOIN payment_service.payments AS p ON p.id = before.id
        WHERE p.state IS DISTINCT FROM 'COMPLETED'
        "#,
    )
    .bind(completed)
    .fetch_one(pool)
    .await
    .context("reading the payments COMPLETED before the failover")?;
    Ok(told.completed_lost + told.closed_contradicted + told.reservations_lost + gone)
}

/// Waits until every buyer let in has an answer and no payment is open; returns when,
/// or `None` after `bound`.
async fn all_terminal(
    pool: &PgPool,
    waves: &Waves,
    answers: &Mutex<Vec<Attempt>>,
    bound: Duration,
) -> Option<Instant> {
    let deadline = Instant::now() + bound;
    loop {
        let answered = answers.lock().map(|a| a.len()).unwrap_or(0);
        if answered >= waves.let_in() && matches!(settle::open(pool).await, Ok(0)) {
            return Some(Instant::now());
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the wave just let in is paying: some of its buyers told COMPLETED (more
/// than `completed_before` payments COMPLETED, so the new primary must hold
/// acknowledged payments of this wave too, not only earlier ones) and payments still in
/// flight.
async fn wave_paying(ctx: &Ctx<'_>, completed_before: usize) -> anyhow::Result<()> {
    let funded_per_wave = ctx.waves.per_wave() / 4;
    let paid = usize::try_from(ctx.plan.units / 5)
        .unwrap_or(usize::MAX)
        .min(funded_per_wave)
        .max(1);
    let deadline = Instant::now() + WAVE_WAIT;
    while !ctx.drop_over() && Instant::now() < deadline {
        let (completed, unfinished) = counts(&ctx.pool).await?;
        if usize::try_from(completed).unwrap_or(0) >= completed_before + paid && unfinished > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

pub async fn inject(scenario: Scenario, ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    let fault = scenario
        .primary_fault()
        .context("a PostgreSQL failover scenario")?;
    let probe = ctx
        .probe
        .clone()
        .context("the PostgreSQL failover scenarios have a probe buyer")?;
    let pool = ctx.pool.clone();
    let answers: Arc<Mutex<Vec<Attempt>>> = ctx.answers.clone();
    let mut failovers = Vec::new();
    let mut exported = false;
    let mut last_routed = None;
    // Payments COMPLETED before the wave struck next was let in.
    let mut completed_before = 0;
    for nth in 0..ctx.plan.failovers {
        let ha = ctx
            .postgres
            .as_deref_mut()
            .context("the PostgreSQL failover scenarios run on a Patroni cluster of their own")?;
        let old = ha
            .primary()
            .await
            .context("no node is primary before the fault")?;
        wave_paying(ctx, completed_before).await?;
        let Aimed { ops } = ctx.aim(&IN_FLIGHT, Aim::AnyBatch, &mut exported).await?;
        // Read before the strike: afterwards there is no primary to read until the
        // failover.
        let before = census(&pool).await?;
        let answered: Vec<Attempt> = answers.lock().map(|a| a.clone()).unwrap_or_default();

        let ha = ctx.postgres.as_deref_mut().context("the Patroni cluster")?;
        let struck_at = Instant::now();
        match fault {
            PrimaryFault::Kill => ha.kill(old).await?,
            PrimaryFault::Cut => ha.cut(old),
        }
        let first_checkout = tokio::spawn(probe.clone().first_checkout(nth as usize));
        let new = ha.wait_primary(Some(old), FAILOVER_WAIT).await?;
        let primary_at = Instant::now();
        ha.wait_routed_to(new, ROUTE_WAIT).await?;
        let routed_at = Instant::now();
        // The fault ends once the cluster has failed over: the killed node is started
        // again (as systemd or Kubernetes would restart it), the cut heals.
        match fault {
            PrimaryFault::Kill => ha.restart(old)?,
            PrimaryFault::Cut => ha.heal(old),
        }
        let healed_at = Instant::now();
        let lost =
            read_retrying(async || lost_in_failover(&pool, &answered, &before.completed).await)
                .await?;
        let (terminal_at, rejoined) = tokio::join!(
            all_terminal(&pool, ctx.waves, &answers, ctx.plan.recovery_bound),
            async {
                let timeline = ha.wait_sync_standby(old, REJOIN_WAIT).await?;
                anyhow::Ok((timeline, Instant::now()))
            }
        );
        let (timeline, rejoined_at) = rejoined?;
        let first_checkout = first_checkout
            .await
            .context("the probe checkout's task failed")?;
        let until = terminal_at.unwrap_or_else(Instant::now);
        let unknown_outcomes = ctx
            .buyer_errors
            .times()
            .into_iter()
            .filter(|t| *t >= struck_at && *t <= until)
            .count();
        failovers.push(Failover {
            nth: nth + 1,
            fault,
            from: ha.node(old).name.clone(),
            to: ha.node(new).name.clone(),
            unfinished_at_fault: before.unfinished,
            completed_at_fault: i64::try_from(before.completed.len()).unwrap_or(i64::MAX),
            batch_ops_at_fault: ops as i64,
            to_new_primary: primary_at - struck_at,
            to_routed: routed_at - struck_at,
            to_first_checkout: first_checkout.map(|at| at.saturating_duration_since(struck_at)),
            to_all_terminal: terminal_at.map(|at| at.saturating_duration_since(struck_at)),
            unknown_outcomes,
            lost,
            to_rejoined: rejoined_at - healed_at,
            timeline,
        });
        tracing::info!(failover = ?failovers.last(), payments = before.payments, "failover done");
        last_routed = Some(routed_at);
        // The next wave comes in: the next strike finds payments in flight again.
        completed_before = read_retrying(async || census(&pool).await)
            .await?
            .completed
            .len();
        ctx.waves.next();
    }
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let mut evidence = vec![(
        PRIMARIES_FAILED_OVER.into(),
        failovers
            .iter()
            .filter(|f| f.unfinished_at_fault > 0)
            .count() as i64,
    )];
    evidence.push((
        OPS_AT_KILLS.into(),
        failovers.iter().map(|f| f.batch_ops_at_fault).sum(),
    ));
    evidence.push((
        PROBE_FAILED.into(),
        failovers
            .iter()
            .filter(|f| f.to_first_checkout.is_none())
            .count() as i64,
    ));
    evidence.push((
        LOST_IN_FAILOVER.into(),
        failovers.iter().map(|f| f.lost).sum(),
    ));
    for f in &failovers {
        let n = f.nth;
        let what = f.fault.name();
        evidence.push((
            format!("failover {n}: payments unfinished at the {what}"),
            f.unfinished_at_fault,
        ));
        evidence.push((
            format!("failover {n}: {what} to new primary (ms)"),
            ms(f.to_new_primary),
        ));
        evidence.push((
            format!("failover {n}: {what} to first checkout (ms)"),
            f.to_first_checkout.map_or(-1, ms),
        ));
        evidence.push((
            format!("failover {n}: {what} to every payment terminal (ms)"),
            f.to_all_terminal.map_or(-1, ms),
        ));
        evidence.push((
            format!("failover {n}: buyers' unknown outcomes"),
            i64::try_from(f.unknown_outcomes).unwrap_or(i64::MAX),
        ));
        evidence.push((
            format!("failover {n}: old primary back in sync after the heal (ms)"),
            ms(f.to_rejoined),
        ));
    }
    Ok(Injection {
        faults: u32::try_from(failovers.len()).unwrap_or(u32::MAX),
        evidence,
        healed_at: last_routed,
        failovers,
    })
}
