//! Running one scenario end to end: start a stack, set up a drop, run the buyers while the
//! fault is injected, heal, wait for recovery, run a small drop to show the system serves
//! again, and read the invariants from PostgreSQL.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use paysaga_drop::{
    invariants, stats::Latency, Admin, Attempt, Buyer, Driver, Endpoints, Outcome, WaitlistPolicy,
};
use paysaga_e2e::{
    binaries, postgres_ha::PostgresHa, redis_cluster::RedisCluster, Stack, StackOptions,
};
use paysaga_supervisor::{PrivateRedis, ServiceKind};
use rand::{rngs::StdRng, SeedableRng};

use crate::{
    evidence,
    impatient::{self, ClientStats},
    inject::{self, Ctx, Probe},
    plan::Plan,
    report::ScenarioReport,
    scenario::Scenario,
    settle,
    waves::Waves,
};

/// How long the gate may take to learn a product's quota, and to rebuild it after a loss.
const QUOTA_WAIT: Duration = Duration::from_secs(30);
/// Between two buyers' arrivals within a wave of a failover scenario (about 65 a second): the
/// wave pays all through its second or so, so a strike finds payments in flight.
const FAILOVER_WAVE_SPACING: Duration = Duration::from_millis(15);
/// Per-request timeout of patient buyers and of the operator's calls.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a buyer waiting in the product's line reads its entry near the head (up to
/// four times less often further back): slower than the demo's, since hundreds wait at
/// once on a machine the faults already load, and a unit offered is held for the buyer
/// ([`crate::scenario::OFFER_TTL`]).
const WAITLIST_POLL: Duration = Duration::from_millis(500);
/// Evidence name: units of the drop on sale or on offer at its end while a buyer's
/// answer was SOLD_OUT. A violation when not 0.
pub const UNSOLD_WHILE_TOLD_SOLD_OUT: &str = "units left unsold while buyers were told sold out";
/// Evidence name: buyers told SOLD_OUT who joined the product's waitlist.
pub const JOINED_WAITLIST: &str = "buyers told sold out who joined the waitlist";
/// Evidence name: buyers who paid for a unit offered to them in the waitlist.
pub const BOUGHT_VIA_WAITLIST: &str = "buyers who bought a unit offered in the waitlist";
/// Per-request timeout of the injectors' reads of `/metrics`: a page that is slow to come
/// is no use for aiming at a batch that lasts milliseconds.
const METRICS_TIMEOUT: Duration = Duration::from_millis(500);

/// Runs `scenario` once at `plan`'s size. An `Err` is a harness failure (a service that
/// would not start, a database that cannot be read); broken invariants are not errors
/// but the report's `violations`.
pub async fn run(scenario: Scenario, plan: &Plan) -> anyhow::Result<ScenarioReport> {
    run_on(scenario, plan, scenario.options(plan)).await
}

/// [`run`] on a stack started with `options` (for a caller that adds settings).
pub async fn run_on(
    scenario: Scenario,
    plan: &Plan,
    mut options: StackOptions,
) -> anyhow::Result<ScenarioReport> {
    let plan = &scenario.adapt(plan);
    let started = Instant::now();
    let mut private_redis = match scenario {
        Scenario::RedisLoss => Some(PrivateRedis::start().await?),
        _ => None,
    };
    if let Some(r) = &private_redis {
        options = options.redis(r.url());
    }
    let mut cluster = match scenario {
        Scenario::RedisClusterMasterLoss => Some(RedisCluster::start().await?),
        _ => None,
    };
    if let Some(c) = &cluster {
        options = options.env(ServiceKind::Gate, "REDIS_CLUSTER_NODES", c.nodes_env());
    }
    // Declared before the stack, so it outlives it: the test database is dropped on the
    // last primary before the cluster goes.
    let (mut postgres, postgres_logs) = match scenario.primary_fault() {
        Some(_) => {
            let dir = binaries::log_dir(&format!("faults-{scenario}-postgres"))?;
            (Some(PostgresHa::start(&dir).await?), Some(dir))
        }
        None => (None, None),
    };
    if let Some(pg) = &postgres {
        options = options.database(pg.admin_url());
    }
    let mut stack = Stack::start(options).await?;
    let mut logs = stack.log_paths();
    if let Some(dir) = &postgres_logs {
        logs.push_str(&format!(
            "\n  Patroni, PostgreSQL, etcd and HAProxy: {}",
            dir.display()
        ));
    }
    let endpoints = Endpoints::from_wiring(stack.wiring());
    let http = paysaga_common::client::http_client(REQUEST_TIMEOUT);
    let admin = Admin::new(endpoints.clone(), http.clone());

    let product = admin
        .create_product(&format!("{scenario}-drop"), plan.price, plan.units)
        .await?;
    let balances: Vec<i64> = (0..plan.buyers).map(|i| plan.balance(i)).collect();
    let buyers = admin
        .open_buyers(&format!("{scenario}-buyer"), &balances, 16)
        .await?;
    admin
        .wait_for_quota(product.id, plan.units, QUOTA_WAIT)
        .await?;
    let probe = match scenario.primary_fault() {
        Some(_) => Some(probe(&admin, &endpoints, plan, scenario).await?),
        None => None,
    };
    let pool = stack.admin_pool().await;

    // The buyers and the injector run side by side; the injector owns the stack (to kill
    // and restart processes), the buyers only need its addresses. Buyers told SOLD_OUT
    // wait in the product's line, as a real buyer may: a unit that comes back (a payment
    // failed, a crash left a reservation to expire) is offered to them. They stay until
    // no unit is held any more, or as long as recovery may take.
    let driver = Driver::new(endpoints.clone(), REQUEST_TIMEOUT).with_waitlist(WaitlistPolicy {
        poll: WAITLIST_POLL,
        wait_for: plan.recovery_bound,
    });
    let drop_done = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(ClientStats::default());
    // A failover scenario's buyers come in waves, one per failover and one after, each
    // let in by the injector; every other scenario's all at once.
    let waves = match scenario.primary_fault() {
        Some(_) => Waves::new(
            buyers.len(),
            plan.failovers as usize + 1,
            FAILOVER_WAVE_SPACING,
        ),
        None => Waves::at_once(buyers.len()),
    };
    let answers = Arc::new(Mutex::new(Vec::new()));
    let load = async {
        let attempts = match scenario {
            Scenario::ImpatientClients => {
                impatient::run_drop(
                    &driver,
                    &buyers,
                    product.id,
                    plan.concurrency,
                    plan.seed,
                    stats.clone(),
                )
                .await
            }
            _ => {
                waves
                    .run(
                        &driver,
                        &buyers,
                        product.id,
                        plan.concurrency,
                        answers.clone(),
                    )
                    .await
            }
        };
        drop_done.store(true, Ordering::Release);
        attempts
    };
    let orchestrator_metrics = stack.metrics_url(ServiceKind::Orchestrator);
    let mut ctx = Ctx {
        stack: &mut stack,
        pool: pool.clone(),
        plan,
        rng: StdRng::seed_from_u64(plan.seed),
        drop_done: drop_done.clone(),
        redis: private_redis.as_mut(),
        cluster: cluster.as_mut(),
        postgres: postgres.as_mut(),
        waves: &waves,
        answers: answers.clone(),
        buyer_errors: driver.errors.clone(),
        probe,
        product: product.id,
        http: paysaga_common::client::http_client(METRICS_TIMEOUT),
        orchestrator_metrics,
        struck: 0,
    };
    let fault = async {
        let injected = inject::inject(scenario, &mut ctx).await;
        // Whatever happened, the buyers still waiting come in: the drop must end.
        waves.all();
        (injected, Instant::now())
    };
    let (attempts, (injected, mut healed_at)) = tokio::join!(load, fault);
    let mut injection = injected?;
    if let Some(at) = injection.healed_at {
        healed_at = at;
    }
    if scenario == Scenario::ImpatientClients {
        // The clients were the fault: it lasted until the last of them was answered.
        healed_at = Instant::now();
        injection.faults =
            u32::try_from(stats.timeouts.load(Ordering::Relaxed)).unwrap_or(u32::MAX);
        injection.evidence = stats.evidence();
    }

    let settled = settle::wait(&pool, healed_at, plan.recovery_bound).await?;
    let acknowledged = evidence::acknowledged(&pool, &attempts).await?;

    // Read before the post-heal wave, which has its own product. A unit on offer once
    // every buyer is done was offered to nobody still waiting: unsold as much as one on
    // sale.
    let unsold: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM order_service.product_stock WHERE product_id = $1 AND state IN ('AVAILABLE', 'OFFERED')"#,
    )
    .bind(product.id)
    .fetch_one(&pool)
    .await?;

    let mut violations = Vec::new();
    if let Err(e) = stack.services.check_alive() {
        violations.push(format!("a service died on its own: {e:#}"));
    }
    if let Err(e) = quota_restored(&admin, product.id).await {
        violations.push(format!("gate quota not restored after healing: {e:#}"));
    }
    let (wave_sold, wave_failure) = wave(&admin, &driver, plan, scenario).await;
    violations.extend(wave_failure);

    let mut evidence = evidence::steps(&pool).await?;
    let page = evidence::metrics_page(&http, &stack.metrics_url(ServiceKind::Gate))
        .await
        .unwrap_or_default();
    evidence.push((
        "gate switches to degraded mode".into(),
        evidence::metric(&page, r#"gate_redis_transitions_total{to="degraded"}"#) as i64,
    ));
    if scenario == Scenario::DatabaseDrops {
        let resets = [
            ServiceKind::Account,
            ServiceKind::Order,
            ServiceKind::Orchestrator,
        ]
        .into_iter()
        .filter_map(|k| stack.proxy(paysaga_e2e::Link::Database(k)))
        .map(|p| p.counts().reset + p.counts().refused)
        .sum::<u64>();
        evidence.push((
            "database connections reset".into(),
            i64::try_from(resets).unwrap_or(i64::MAX),
        ));
    }

    if scenario.primary_fault().is_some() {
        evidence.push((
            "buyer requests with an unknown outcome (5xx, cut, timeout)".into(),
            i64::try_from(driver.errors.times().len()).unwrap_or(i64::MAX),
        ));
    }
    evidence.push((
        "buyers told COMPLETED, checked in the database".into(),
        acknowledged.completed,
    ));

    let tally = Tally::of(&attempts);
    // Buyers told SOLD_OUT wait in line until no unit is held any more, so one whose
    // answer stayed SOLD_OUT left when every unit was sold: a unit unsold at the end
    // means a buyer was turned away from stock that was there (docs/faults.md).
    let unsold_while_told = if tally.sold_out > 0 { unsold } else { 0 };
    evidence.push((UNSOLD_WHILE_TOLD_SOLD_OUT.into(), unsold_while_told));
    evidence.push((
        JOINED_WAITLIST.into(),
        count(&attempts, |a| {
            a.waitlist.as_ref().is_some_and(|w| w.entry_id.is_some())
        }),
    ));
    evidence.push((
        BOUGHT_VIA_WAITLIST.into(),
        count(&attempts, Attempt::via_waitlist),
    ));
    evidence.push((
        "buyers told sold out by the order service".into(),
        i64::try_from(tally.sold_out_at_order).unwrap_or(i64::MAX),
    ));

    let report = invariants::check(&pool).await?;
    evidence.push((
        "units left unsold while waiters went without".into(),
        report.unsold_while_waiters_went_without,
    ));
    evidence.push((
        "units to a buyer behind a waiter who went without".into(),
        report.units_to_later_arrivals,
    ));
    violations.extend(
        report
            .violations()
            .into_iter()
            // Judged below against the recovery bound, where flagged payments count as settled.
            .filter(|v| !v.starts_with("payments not terminal")),
    );
    if report.units_to_later_arrivals > 0 {
        violations.extend(invariants::later_arrivals_explained(&pool).await?);
    }
    violations.extend(acknowledged.violations());
    for (name, what) in [
        (
            inject::PROBE_FAILED,
            "failovers after which no probe checkout completed",
        ),
        (
            inject::LOST_IN_FAILOVER,
            "acknowledged answers or commits missing on the new primary after a failover",
        ),
    ] {
        let n = injection
            .evidence
            .iter()
            .find(|(e, _)| e == name)
            .map_or(0, |(_, n)| *n);
        if n > 0 {
            violations.push(format!("{what}: {n}"));
        }
    }
    if !settled.within_bound {
        violations.push(format!(
            "payments neither terminal nor flagged with a cause, or holds not settled, {:?} after healing: {} open, {} flagged without a cause, {} holds owed",
            plan.recovery_bound, settled.open, settled.flagged_without_cause, settled.holds_owed
        ));
    }
    let keys_twice = stats.keys_with_two_payments.load(Ordering::Relaxed);
    if keys_twice > 0 {
        violations.push(format!(
            "Idempotency-Keys answered with two different payments: {keys_twice}"
        ));
    }
    if unsold_while_told > 0 {
        violations.push(format!(
            "{UNSOLD_WHILE_TOLD_SOLD_OUT}: {unsold_while_told} (buyers told sold out: {})",
            tally.sold_out
        ));
    }
    if tally.unanswered > 0 {
        violations.push(format!(
            "buyers without a definite answer: {} (e.g. {:?})",
            tally.unanswered,
            attempts.iter().find(|a| !a.outcome.is_definite()).map(|a| (
                &a.member,
                &a.outcome,
                a.payment_id
            ))
        ));
    }
    let waits = Latency::of_durations(attempts.iter().map(|a| &a.time_to_answer));
    Ok(ScenarioReport {
        scenario,
        seed: plan.seed,
        buyers: plan.buyers,
        completed: tally.completed,
        failed: tally.failed,
        refunded: tally.refunded,
        sold_out: tally.sold_out,
        rejected: tally.rejected,
        unanswered: tally.unanswered,
        answer_p50: waits.p50(),
        answer_max: waits.max(),
        injection,
        evidence,
        settled,
        invariants: report,
        violations,
        wave_sold,
        wave_units: plan.wave_units,
        elapsed: started.elapsed(),
        logs,
    })
}

/// A probe product and funded buyers, [`Probe::PER_FAILOVER`] of each per failover, for
/// timing the first checkout after each.
async fn probe(
    admin: &Admin,
    endpoints: &Endpoints,
    plan: &Plan,
    scenario: Scenario,
) -> anyhow::Result<Probe> {
    let n = Probe::PER_FAILOVER * plan.failovers as usize;
    let units = i64::try_from(n).unwrap_or(i64::MAX);
    let product = admin
        .create_product(&format!("{scenario}-probe"), plan.price, units)
        .await?;
    let buyers = admin
        .open_buyers(&format!("{scenario}-probe"), &vec![plan.price * 2; n], 3)
        .await?;
    admin.wait_for_quota(product.id, units, QUOTA_WAIT).await?;
    Ok(Probe {
        driver: Driver::new(endpoints.clone(), REQUEST_TIMEOUT).with_patience(Probe::patience()),
        buyers,
        product: product.id,
    })
}

/// Attempts for which `f` holds.
fn count(attempts: &[Attempt], f: impl Fn(&Attempt) -> bool) -> i64 {
    i64::try_from(attempts.iter().filter(|a| f(a)).count()).unwrap_or(i64::MAX)
}

/// Buyers by what they were told.
#[derive(Debug, Default)]
struct Tally {
    completed: usize,
    failed: usize,
    refunded: usize,
    sold_out: usize,
    sold_out_at_order: usize,
    rejected: usize,
    unanswered: usize,
}

impl Tally {
    fn of(attempts: &[Attempt]) -> Self {
        let mut t = Tally::default();
        for a in attempts {
            match a.outcome {
                Outcome::Completed => t.completed += 1,
                Outcome::Failed { .. } => t.failed += 1,
                Outcome::Refunded => t.refunded += 1,
                Outcome::SoldOutAtGate => t.sold_out += 1,
                Outcome::SoldOutAtOrder => {
                    t.sold_out += 1;
                    t.sold_out_at_order += 1;
                }
                Outcome::Rejected { .. } => t.rejected += 1,
                Outcome::Unanswered { .. } => t.unanswered += 1,
            }
        }
        t
    }
}

/// Waits until the gate's quota for `product_id` is again `max(0, available − in flight)`
/// with `available` from the order service (the recompute job's rule).
async fn quota_restored(admin: &Admin, product_id: i64) -> anyhow::Result<()> {
    let deadline = Instant::now() + QUOTA_WAIT;
    loop {
        let last = match (
            admin.gate().quota(product_id).await,
            admin.order().product(product_id).await,
        ) {
            (Ok(q), Ok(a)) => {
                let expected = (a.body.available - q.body.in_flight).max(0);
                if q.body.quota == expected {
                    return Ok(());
                }
                format!(
                    "quota {} in flight {} available {}",
                    q.body.quota, q.body.in_flight, a.body.available
                )
            }
            (q, a) => format!("gate: {:?} order: {:?}", q.err(), a.err()),
        };
        if Instant::now() >= deadline {
            anyhow::bail!("not within {QUOTA_WAIT:?}; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A small drop on a new product after healing: every unit must sell to funded buyers
/// who all get a definite answer. Returns units sold and a violation if it fell short.
async fn wave(
    admin: &Admin,
    driver: &Driver,
    plan: &Plan,
    scenario: Scenario,
) -> (i64, Option<String>) {
    match wave_inner(admin, driver, plan, scenario).await {
        Ok((sold, unanswered)) if sold == plan.wave_units && unanswered == 0 => (sold, None),
        Ok((sold, unanswered)) => (
            sold,
            Some(format!(
                "after healing a drop of {} units sold {sold} ({unanswered} buyers unanswered)",
                plan.wave_units
            )),
        ),
        Err(e) => (
            0,
            Some(format!("after healing a new drop could not run: {e:#}")),
        ),
    }
}

async fn wave_inner(
    admin: &Admin,
    driver: &Driver,
    plan: &Plan,
    scenario: Scenario,
) -> anyhow::Result<(i64, usize)> {
    let product = admin
        .create_product(&format!("{scenario}-wave"), plan.price, plan.wave_units)
        .await?;
    let balances = vec![plan.price * 2; plan.wave_buyers];
    let buyers: Vec<Buyer> = admin
        .open_buyers(&format!("{scenario}-wave"), &balances, 16)
        .await?;
    admin
        .wait_for_quota(product.id, plan.wave_units, QUOTA_WAIT)
        .await?;
    let attempts = driver.run_drop(&buyers, product.id, 0, |_| {}).await;
    let sold = attempts
        .iter()
        .filter(|a| a.outcome == Outcome::Completed)
        .count();
    let unanswered = attempts.iter().filter(|a| !a.outcome.is_definite()).count();
    Ok((i64::try_from(sold).unwrap_or(i64::MAX), unanswered))
}
