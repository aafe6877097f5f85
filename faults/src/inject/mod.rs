//! Injecting each scenario's fault into a running drop, at moments when payments are
//! actually in flight, and healing it afterwards.

mod account_crash;
mod database_drops;
mod orchestrator_crash;
mod order_partition;
mod redis_loss;
mod slow_account;

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use paysaga_e2e::{private_redis::PrivateRedis, FaultProxy, Link, ServiceKind, Stack, Stop};
use rand::{rngs::StdRng, Rng};
use sqlx::PgPool;

use crate::{plan::Plan, scenario::Scenario};

/// What an injector did, as counts a report can print.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Injection {
    /// Faults injected (kills, latency pulses, cuts, connection resets).
    pub faults: u32,
    /// Named counts showing the faults hit work in progress.
    pub evidence: Vec<(String, i64)>,
}

/// What an injector works with while the drop runs.
pub struct Ctx<'a> {
    pub stack: &'a mut Stack,
    pub pool: PgPool,
    pub plan: &'a Plan,
    pub rng: StdRng,
    /// Set when every buyer has an answer (or gave up): nothing is in flight any more.
    pub drop_done: Arc<AtomicBool>,
    /// The scenario's own Redis, for a scenario that kills it.
    pub redis: Option<&'a mut PrivateRedis>,
}

/// How long an injector waits for payments to be in flight before injecting anyway.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(15);

impl Ctx<'_> {
    /// Payments in `states` right now.
    pub async fn count_in(&self, states: &[&str]) -> anyhow::Result<i64> {
        let states: Vec<String> = states.iter().map(|s| (*s).to_owned()).collect();
        sqlx::query_scalar(r#"SELECT COUNT(*) FROM payment_service.payments WHERE state = ANY($1)"#)
            .bind(&states)
            .fetch_one(&self.pool)
            .await
            .context("counting payments in flight")
    }

    /// Payments not yet terminal.
    pub async fn unfinished(&self) -> anyhow::Result<i64> {
        self.count_in(&[
            "PROCESSING",
            "ACCOUNT_DEBITED",
            "ORDER_CONFIRMED",
            "REFUND_PROCESSING",
        ])
        .await
    }

    /// Polls until some payment is in one of `states` (the moment to strike), the drop is
    /// over, or [`IN_FLIGHT_WAIT`] passes. Returns how many were there.
    pub async fn strike_when_in(&self, states: &[&str]) -> anyhow::Result<i64> {
        let deadline = Instant::now() + IN_FLIGHT_WAIT;
        loop {
            let n = self.count_in(states).await?;
            if n > 0 || self.drop_done.load(Ordering::Acquire) || Instant::now() >= deadline {
                return Ok(n);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Whether every buyer is done: later faults would hit an idle system, so injectors
    /// stop repeating (the first fault is always injected).
    pub fn drop_over(&self) -> bool {
        self.drop_done.load(Ordering::Acquire)
    }

    /// Sleeps a random time in `[lo, hi)`.
    pub async fn pause(&mut self, lo: Duration, hi: Duration) {
        let ms = self
            .rng
            .gen_range(lo.as_millis() as u64..hi.as_millis().max(lo.as_millis() + 1) as u64);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// The proxy on `link`; the scenario's stack options route it.
    pub fn proxy(&self, link: Link) -> anyhow::Result<&FaultProxy> {
        self.stack
            .proxy(link)
            .with_context(|| format!("the stack has no proxy on {link:?}"))
    }

    /// SIGKILLs `kind` while payments are unfinished, keeps it down a moment, restarts
    /// it (waiting until ready), `plan.repeats` times.
    pub async fn kill_repeatedly(
        &mut self,
        kind: ServiceKind,
        strike: &[&str],
    ) -> anyhow::Result<Injection> {
        let mut kills = 0;
        let mut unfinished_at_kill = 0;
        for i in 0..self.plan.repeats {
            if i > 0 && self.drop_over() {
                break;
            }
            self.strike_when_in(strike).await?;
            let unfinished = self.unfinished().await?;
            self.stack.stop(kind, Stop::Kill).await?;
            kills += 1;
            unfinished_at_kill += unfinished;
            self.pause(Duration::from_millis(100), Duration::from_millis(800))
                .await;
            self.stack.start_service(kind).await?;
            self.pause(Duration::from_millis(200), Duration::from_millis(1200))
                .await;
        }
        Ok(Injection {
            faults: kills,
            evidence: vec![("payments unfinished at a kill".into(), unfinished_at_kill)],
        })
    }
}

/// Injects `scenario`'s fault into the running drop and heals it. Scenarios whose fault
/// is the clients' own behaviour inject nothing here.
pub async fn inject(scenario: Scenario, ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    match scenario {
        Scenario::OrchestratorCrash => orchestrator_crash::inject(ctx).await,
        Scenario::SlowAccount => slow_account::inject(ctx).await,
        Scenario::OrderPartition => order_partition::inject(ctx).await,
        Scenario::AccountCrash => account_crash::inject(ctx).await,
        Scenario::RedisLoss => redis_loss::inject(ctx).await,
        Scenario::DatabaseDrops => database_drops::inject(ctx).await,
        Scenario::ImpatientClients => Ok(Injection::default()),
    }
}
