//! Injecting each scenario's fault into a running drop, at moments when payments are
//! actually in flight, and healing it afterwards.

mod account_crash;
mod database_drops;
mod orchestrator_crash;
mod order_crash;
mod order_partition;
mod postgres_failover;
mod redis_cluster;
mod redis_loss;
mod slow_account;

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use paysaga_drop::{Attempt, ErrorLog};
use paysaga_e2e::{postgres_ha::PostgresHa, redis_cluster::RedisCluster, FaultProxy, Link, Stack};
use paysaga_supervisor::{PrivateRedis, ServiceKind, Stop};
use rand::{rngs::StdRng, Rng};
use sqlx::PgPool;

use crate::{evidence, plan::Plan, scenario::Scenario, waves::Waves};

pub use postgres_failover::{Failover, Probe};

/// Evidence name: kills struck while the orchestrator reported an operation in flight in
/// the batch the kill was aimed at.
pub const KILLS_WITH_BATCH: &str = "kills with a batch in flight";
/// Evidence name: operations in those batches at their kills, summed.
pub const OPS_AT_KILLS: &str = "batched operations in flight at a kill";
/// Evidence name: kills before which the orchestrator exported the gauge of the batch
/// aimed at. Zero means it does not batch there, so no kill could be aimed.
pub const KILLS_WITH_GAUGE: &str = "kills aimed with the batch gauge exported";

/// Evidence name: a probe checkout that never completed after its fault (a violation).
pub const PROBE_FAILED: &str = "probe checkouts that never completed";
/// Evidence name: answers buyers had before a failover (COMPLETED, FAILED, REFUNDED, a
/// reservation), and payments the old primary had COMPLETED, that the new primary does
/// not hold (a violation).
pub const LOST_IN_FAILOVER: &str = "acknowledged answers and commits missing on a new primary";

/// What an injector did, as counts a report can print.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Injection {
    /// Faults injected (kills, latency pulses, cuts, connection resets).
    pub faults: u32,
    /// Named counts showing the faults hit work in progress.
    pub evidence: Vec<(String, i64)>,
    /// When the system was whole again, for a scenario whose heal is a condition met
    /// (a promoted standby in rotation) rather than the injector's return.
    #[serde(skip)]
    pub healed_at: Option<Instant>,
    /// Each PostgreSQL failover, for the failover scenarios.
    pub failovers: Vec<Failover>,
}

impl Injection {
    /// `faults` injected, shown hitting work in progress by one named count.
    pub fn evidenced(faults: u32, what: &str, count: i64) -> Self {
        Injection {
            faults,
            evidence: vec![(what.into(), count)],
            ..Injection::default()
        }
    }
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
    /// The scenario's own Redis Cluster, for a scenario that kills one of its masters.
    pub cluster: Option<&'a mut RedisCluster>,
    /// The scenario's own Patroni cluster behind HAProxy, for a scenario that strikes
    /// its primary.
    pub postgres: Option<&'a mut PostgresHa>,
    /// The drop's buyers, let in in waves (one wave, at once, but in the failover
    /// scenarios).
    pub waves: &'a Waves,
    /// Every answer the drop's buyers have had so far.
    pub answers: Arc<Mutex<Vec<Attempt>>>,
    /// When the drop's buyers' requests ended in an unknown outcome.
    pub buyer_errors: ErrorLog,
    /// A buyer's checkouts timed through a fault, for a scenario that measures when the
    /// system sells again.
    pub probe: Option<Probe>,
    /// The drop's product.
    pub product: i64,
    /// A client for the orchestrator's `/metrics`, polled to aim kills at batches.
    pub http: reqwest::Client,
    /// Where the orchestrator serves `/metrics` (its own listener, the same across its
    /// restarts).
    pub orchestrator_metrics: String,
    /// Strikes [`Ctx::next_strike`] has let go ahead so far.
    pub struck: u32,
}

/// Which of the orchestrator's batchers a kill is aimed at (`paysaga_common::batch`
/// names them; every batcher exports `paysaga_batch_in_flight_ops{batch="<name>"}`).
#[derive(Debug, Clone, Copy)]
pub enum Aim {
    /// The batcher with this name: `account` (debits and credits to the account service),
    /// `order` (confirms and cancels to the order service).
    Batch(&'static str),
    /// Any of them (`account`, `order`, `saga_writes`: the orchestrator's own group-committed
    /// PostgreSQL writes).
    AnyBatch,
}

impl Aim {
    fn name(self) -> Option<&'static str> {
        match self {
            Aim::Batch(name) => Some(name),
            Aim::AnyBatch => None,
        }
    }
}

/// How long an injector waits for payments to be in flight before injecting anyway.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(15);
/// Once payments are in a kill's states, how long it waits for its batch to be in flight
/// before striking without one. A batch lives for one round trip and one commit
/// (milliseconds), so under a running drop one is in flight most of the time; a longer
/// wait would mostly outlast the drop.
const BATCH_WAIT: Duration = Duration::from_millis(1500);
/// The same wait while the orchestrator has not yet exported the gauge in this run: it
/// appears with the first flush, which payments in the states are about to send, but an
/// orchestrator that does not batch never exports it, and its kill should not wait long.
const FIRST_BATCH_WAIT: Duration = Duration::from_millis(200);
/// Pause between two looks (payments' states, then the orchestrator's `/metrics`) while
/// aiming: a batch in flight lasts a few milliseconds, a coarser poll would mostly miss it.
const BATCH_POLL: Duration = Duration::from_millis(2);

/// The moment a strike found.
#[derive(Debug, Clone, Copy, Default)]
pub struct Aimed {
    /// Operations in flight in the batch aimed at, at the last read before the strike (0:
    /// it strikes without a batch in flight).
    pub ops: f64,
}

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

    /// Before the next strike of a repeated fault: false once the plan's repeats are
    /// made or the drop is over (the first strike always goes ahead), else true when
    /// payments are mid-saga (taking money or just debited), the moment the fault hurts
    /// most.
    pub async fn next_strike(&mut self) -> anyhow::Result<bool> {
        if self.struck >= self.plan.repeats || (self.struck > 0 && self.drop_over()) {
            return Ok(false);
        }
        self.strike_when_in(&["PROCESSING", "ACCOUNT_DEBITED"])
            .await?;
        self.struck += 1;
        Ok(true)
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

    /// Sleeps 300 ms to 1 s after a fault heals, so the next one lands at a random point
    /// of the recovery.
    pub async fn between_strikes(&mut self) {
        self.pause(Duration::from_millis(300), Duration::from_millis(1000))
            .await;
    }

    /// Heals `link`, then waits [`Ctx::between_strikes`].
    pub async fn heal_then_wait(&mut self, link: Link) -> anyhow::Result<()> {
        self.proxy(link)?.heal();
        self.between_strikes().await;
        Ok(())
    }

    /// The scenario's own Redis; `scenario` names the scenario in the error without one.
    pub fn private_redis(&mut self, scenario: &str) -> anyhow::Result<&mut PrivateRedis> {
        self.redis
            .as_deref_mut()
            .with_context(|| format!("the {scenario} scenario runs on a private Redis"))
    }

    /// The scenario's Redis Cluster; `scenario` names the scenario in the error without one.
    pub fn redis_cluster(&mut self, scenario: &str) -> anyhow::Result<&mut RedisCluster> {
        self.cluster
            .as_deref_mut()
            .with_context(|| format!("the {scenario} scenario runs on a Redis Cluster"))
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

    /// Waits for the moment to strike: payments in one of the `strike` states while `aim`'s
    /// batch has operations in flight in the orchestrator (its gauge, read from `/metrics`
    /// right after the states), or else payments in the states for [`BATCH_WAIT`] without
    /// a batch ([`FIRST_BATCH_WAIT`] while `exported` is false, i.e. the gauge was never
    /// seen in this run), or the drop over, or [`IN_FLIGHT_WAIT`] gone. Both conditions,
    /// because a batcher also carries reads (the account and reservation checks before a
    /// payment exists), so a batch in flight alone does not mean a step is. An absent
    /// gauge (an orchestrator that does not batch, or has not flushed since it started)
    /// and a page that cannot be read (it may be starting) count as 0. Sets `exported`
    /// once the gauge is seen.
    pub async fn aim(
        &self,
        strike: &[&str],
        aim: Aim,
        exported: &mut bool,
    ) -> anyhow::Result<Aimed> {
        let deadline = Instant::now() + IN_FLIGHT_WAIT;
        let mut in_state_since: Option<Instant> = None;
        loop {
            if self.count_in(strike).await? > 0 {
                let since = *in_state_since.get_or_insert_with(Instant::now);
                if let Ok(page) =
                    evidence::metrics_page(&self.http, &self.orchestrator_metrics).await
                {
                    if let Some(ops) = evidence::batch_in_flight(&page, aim.name()) {
                        *exported = true;
                        if ops > 0.0 {
                            return Ok(Aimed { ops });
                        }
                    }
                }
                let patience = if *exported {
                    BATCH_WAIT
                } else {
                    FIRST_BATCH_WAIT
                };
                if since.elapsed() >= patience {
                    return Ok(Aimed::default());
                }
            } else {
                in_state_since = None;
            }
            if self.drop_over() || Instant::now() >= deadline {
                return Ok(Aimed::default());
            }
            tokio::time::sleep(BATCH_POLL).await;
        }
    }

    /// SIGKILLs `kind` while payments are in one of the `strike` states, keeps it down a
    /// moment, restarts it (waiting until ready), `plan.repeats` times. Each kill is aimed
    /// at an orchestrator batch in flight (`aim`): it follows the first read of the
    /// batch's gauge above 0 at once (see [`Ctx::aim`] for when it strikes without one).
    pub async fn kill_repeatedly(
        &mut self,
        kind: ServiceKind,
        strike: &[&str],
        aim: Aim,
    ) -> anyhow::Result<Injection> {
        let mut kills = 0;
        let mut unfinished_at_kill = 0;
        let mut in_state_at_kill = 0;
        let mut kills_with_batch = 0;
        let mut kills_with_gauge = 0;
        let mut ops_at_kills = 0.0;
        let mut exported = false;
        for i in 0..self.plan.repeats {
            if i > 0 && self.drop_over() {
                break;
            }
            let Aimed { ops } = self.aim(strike, aim, &mut exported).await?;
            self.stack.stop(kind, Stop::Kill).await?;
            kills += 1;
            kills_with_gauge += i64::from(exported);
            if ops > 0.0 {
                kills_with_batch += 1;
                ops_at_kills += ops;
            }
            // Read after the kill, so nothing delays it: the payments waiting on the dead
            // process stay where it left them until it is back.
            unfinished_at_kill += self.unfinished().await?;
            in_state_at_kill += self.count_in(strike).await?;
            self.pause(Duration::from_millis(100), Duration::from_millis(800))
                .await;
            self.stack.start_service(kind).await?;
            self.pause(Duration::from_millis(200), Duration::from_millis(1200))
                .await;
        }
        Ok(Injection {
            faults: kills,
            evidence: vec![
                ("payments unfinished at a kill".into(), unfinished_at_kill),
                (
                    format!("payments in {} at a kill", strike.join(" or ")),
                    in_state_at_kill,
                ),
                (KILLS_WITH_BATCH.into(), kills_with_batch),
                (OPS_AT_KILLS.into(), ops_at_kills as i64),
                (KILLS_WITH_GAUGE.into(), kills_with_gauge),
            ],
            ..Injection::default()
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
        Scenario::OrderCrash => order_crash::inject(ctx).await,
        Scenario::RedisClusterMasterLoss => redis_cluster::inject(ctx).await,
        Scenario::PostgresFailover | Scenario::PostgresPartition => {
            postgres_failover::inject(scenario, ctx).await
        }
    }
}
