//! Part 9, the seeds' tables: the seed documents' experiments through HTTP against the real services, medians of several runs beside the seed's figures.
//!
//! - Seed 004, locking: 1,000 orders for 100 units from 100 clients, each buyer with a
//!   pass of its own (signed here with the development pass key) straight to the order
//!   service, under the service's claim and under one counter row per product locked
//!   `FOR UPDATE` for the whole reservation (`CLAIM_STRATEGY=counter-for-update`).
//! - Seed 004, intake: a crowd of 1,000 buyers arriving at once for 100 units, through
//!   the gate, and through a Redis Streams intake queue ([`crate::intake_queue`]).
//! - Seed 003: its four strategies (`optimistic`, `optimistic-retry`,
//!   `counter-for-update`, `atomic-update`) on the same 1,000 orders at 100 clients.
//!
//! A strategy is read when the order service starts, so each is a system of its own;
//! each run is a fresh product for the same buyers. An order is one
//! `POST /v1/reservations` (the buyer's price held on its account, then the claim), the
//! seeds' "order" (stock taken, reservation made); no payment follows.

use std::{collections::BTreeMap, fmt::Write as _, sync::Arc};

use order::claim_alternatives::ClaimStrategy;
use paysaga_supervisor::ServiceKind;
use sqlx::PgPool;

use crate::{
    client::{self, Buyers},
    error::Result,
    intake_queue::{self, IntakeQueue},
    load::{self, Load},
    scenario::{
        drop::{mint_passes, DROP_TIME_BOUND, PRICE},
        gate::QUOTA_WAIT,
    },
    stats::RunSummary,
    system::{sum_counter, sum_series, System},
    Bench,
};

pub const SCENARIO: &str = "9 seeds";
/// Clients sending the orders of the locking runs (seed 003's 100 virtual users).
pub const CLIENTS: usize = 100;
/// Consumers of the intake queue's group.
pub const QUEUE_CONSUMERS: usize = 8;
/// Each buyer's opening balance: every run's reservation keeps its hold until it
/// expires, and a buyer may win in every run.
const BALANCE: i64 = PRICE * 20;

/// The size of the experiments.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub orders: u64,
    pub units: u64,
    pub locking_runs: usize,
    pub queue_runs: usize,
}

impl Shape {
    pub fn of(quick: bool) -> Self {
        if quick {
            Self {
                orders: 200,
                units: 20,
                locking_runs: 3,
                queue_runs: 3,
            }
        } else {
            Self {
                orders: 1_000,
                units: 100,
                locking_runs: 5,
                queue_runs: 3,
            }
        }
    }
}

/// The strategies in the order the tables show them.
const STRATEGIES: [ClaimStrategy; 5] = [
    ClaimStrategy::UnitsSkipLocked,
    ClaimStrategy::CounterForUpdate,
    ClaimStrategy::Optimistic,
    ClaimStrategy::OptimisticRetry,
    ClaimStrategy::AtomicUpdate,
];

/// What one run measured.
#[derive(Debug, Clone, Default)]
struct RunFigures {
    p50_ms: f64,
    p95_ms: f64,
    max_ms: f64,
    per_s: f64,
    elapsed_s: f64,
    reserved: f64,
    sold_out: f64,
    conflict: f64,
    errors: f64,
    /// Units not AVAILABLE after the run, read from PostgreSQL.
    sold: f64,
    /// Live reservations beyond the units, or sharing a unit, from PostgreSQL.
    oversold: f64,
    /// `POST /v1/reservations` the order service counted.
    reached_order: f64,
    /// Mean time a claim held the counter row (the alternatives), or one claim statement
    /// took (the service's claim: a flush), from the order service's histograms.
    held_ms: f64,
    /// The counter row held in all (or claim statements in all) ÷ the run's wall time.
    held_share: f64,
    /// Claims per statement (the service's group commit; 1 for the alternatives).
    per_statement: f64,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1_000.0
}

impl RunFigures {
    fn of(s: &RunSummary) -> Self {
        let n = |k: &str| s.count(k) as f64;
        Self {
            p50_ms: ms(s.latency.p50_us),
            p95_ms: ms(s.latency.p95_us),
            max_ms: ms(s.latency.max_us),
            per_s: s.per_s,
            elapsed_s: s.elapsed_s,
            reserved: n("reserved"),
            sold_out: n("sold_out"),
            conflict: n("conflict"),
            errors: s.errors() as f64,
            ..Self::default()
        }
    }
}

/// The order service's counters a run is measured by, read before and after.
#[derive(Debug, Clone, Copy, Default)]
struct OrderCounters {
    reached: f64,
    held_sum: f64,
    held_count: f64,
    flush_sum: f64,
    flush_count: f64,
    flushed_claims: f64,
    flushes: f64,
}

impl OrderCounters {
    async fn read(sys: &System) -> Result<Self> {
        let page = sys.order_metrics().await?;
        let claims = [r#"batch="claims""#];
        Ok(Self {
            reached: sum_counter(
                &page,
                "http_requests_total",
                &[r#"method="POST""#, r#"route="/v1/reservations""#],
            ) as f64,
            held_sum: sum_series(&page, "order_claim_counter_held_seconds_sum"),
            held_count: sum_series(&page, "order_claim_counter_held_seconds_count"),
            flush_sum: sum_series(&page, "order_claim_flush_seconds_sum"),
            flush_count: sum_series(&page, "order_claim_flush_seconds_count"),
            flushed_claims: sum_counter(&page, "paysaga_batch_ops_sum", &claims) as f64,
            flushes: sum_counter(&page, "paysaga_batch_ops_count", &claims) as f64,
        })
    }

    /// Fills `f`'s order-side figures from the counters' movement over the run.
    fn fill(before: Self, after: Self, f: &mut RunFigures) {
        f.reached_order = after.reached - before.reached;
        let (sum, count) = if after.held_count > before.held_count {
            (
                after.held_sum - before.held_sum,
                after.held_count - before.held_count,
            )
        } else {
            (
                after.flush_sum - before.flush_sum,
                after.flush_count - before.flush_count,
            )
        };
        f.held_ms = 1_000.0 * sum / count.max(1.0);
        f.held_share = sum / f.elapsed_s.max(1e-9);
        let flushes = after.flushes - before.flushes;
        f.per_statement = if flushes > 0.0 {
            (after.flushed_claims - before.flushed_claims) / flushes
        } else {
            1.0
        };
    }
}

/// Units not AVAILABLE, and live reservations beyond the units or sharing one.
async fn units_of(pool: &PgPool, product: i64, units: u64) -> Result<(f64, f64)> {
    let (sold, live, distinct): (i64, i64, i64) = sqlx::query_as(
        r#"
        SELECT (SELECT COUNT(*) FROM order_service.product_stock
                WHERE product_id = $1 AND state <> 'AVAILABLE'),
               COUNT(*), COUNT(DISTINCT unit_id)
        FROM order_service.reservations
        WHERE product_id = $1 AND state IN ('RESERVED', 'CONFIRMED')
        "#,
    )
    .bind(product)
    .fetch_one(pool)
    .await?;
    let beyond = (distinct - units as i64).max(0);
    Ok((sold as f64, ((live - distinct) + beyond) as f64))
}

/// A system whose order service claims per `strategy`, and its buyers.
async fn start(bench: &Bench, strategy: ClaimStrategy, shape: Shape) -> Result<(System, Buyers)> {
    let http = client::http_client(shape.orders as usize)?;
    let sys = System::start_with(&format!("bench-seeds-{strategy}"), http, |o| {
        o.env(ServiceKind::Order, "CLAIM_STRATEGY", strategy)
    })
    .await?;
    let seeded = sys
        .seed_buyers(
            &format!("seeds-{}-{strategy}", bench.run_id),
            shape.orders as usize,
            BALANCE,
        )
        .await?;
    Ok((sys, seeded.buyers))
}

/// One locking run: every buyer's order with its own pass, `CLIENTS` at a time.
async fn locking_run(
    sys: &System,
    pool: &PgPool,
    buyers: &Buyers,
    name: &str,
    shape: Shape,
) -> Result<(RunFigures, RunSummary)> {
    let product = sys.create_product(name, PRICE, shape.units).await?;
    let passes = mint_passes(buyers, product, shape.orders as usize);
    let before = OrderCounters::read(sys).await?;
    let load = Load {
        show_progress: false,
        ..Load::new(name, CLIENTS, shape.orders, DROP_TIME_BOUND)
    };
    let (http, order, buyers) = (sys.http.clone(), sys.order.clone(), buyers.clone());
    let summary = load::run(&load, move |ctx| {
        let (http, order, buyers, passes) =
            (http.clone(), order.clone(), buyers.clone(), passes.clone());
        async move {
            let i = ctx.seq as usize;
            intake_queue::reserve(&http, &order, buyers.token(i), product, &passes[i]).await
        }
    })
    .await;
    let after = OrderCounters::read(sys).await?;
    let mut f = RunFigures::of(&summary);
    OrderCounters::fill(before, after, &mut f);
    (f.sold, f.oversold) = units_of(pool, product, shape.units).await?;
    Ok((f, summary))
}

/// How the crowd of the intake runs enters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Intake {
    Gate,
    Queue,
}

/// One intake run: the whole crowd at once; a buyer's time is from its arrival to its
/// answer (a reservation, or SOLD_OUT from the gate or the order service).
async fn intake_run(
    bench: &Bench,
    sys: &System,
    pool: &PgPool,
    buyers: &Buyers,
    intake: Intake,
    run: usize,
    shape: Shape,
) -> Result<(RunFigures, RunSummary)> {
    let name = format!("{SCENARIO}: intake {intake:?} {run}");
    let product = sys.create_product(&name, PRICE, shape.units).await?;
    let load = Load {
        show_progress: false,
        ..Load::new(&name, shape.orders as usize, shape.orders, DROP_TIME_BOUND)
    };
    let before = OrderCounters::read(sys).await?;
    let summary = match intake {
        Intake::Gate => {
            sys.wait_quota(product, shape.units as i64, QUOTA_WAIT)
                .await?;
            let ep = sys.endpoints(sys.http.clone());
            let buyers = buyers.clone();
            load::run(&load, move |ctx| {
                let (ep, buyers) = (ep.clone(), buyers.clone());
                async move {
                    let token = buyers.token(ctx.seq as usize);
                    let pass = match ep.pass(token, product).await {
                        Ok(p) => p,
                        Err(o) => return o,
                    };
                    intake_queue::reserve(&ep.http, &ep.order, token, product, &pass).await
                }
            })
            .await
        }
        Intake::Queue => {
            let passes = mint_passes(buyers, product, shape.orders as usize);
            let queue = Arc::new(
                IntakeQueue::start(
                    &bench.settings.redis_url,
                    format!("{}seeds:intake:{product}", bench.redis_prefix),
                    QUEUE_CONSUMERS,
                    sys.http.clone(),
                    sys.order.clone(),
                    buyers.clone(),
                    product,
                )
                .await?,
            );
            let q = queue.clone();
            let summary = load::run(&load, move |ctx| {
                let (q, passes) = (q.clone(), passes.clone());
                async move {
                    let i = ctx.seq as usize;
                    q.order(i, &passes[i]).await
                }
            })
            .await;
            queue.stop().await?;
            summary
        }
    };
    let after = OrderCounters::read(sys).await?;
    let mut f = RunFigures::of(&summary);
    OrderCounters::fill(before, after, &mut f);
    (f.sold, f.oversold) = units_of(pool, product, shape.units).await?;
    Ok((f, summary))
}

/// Median, min and max of one figure over runs.
fn spread(runs: &[RunFigures], figure: impl Fn(&RunFigures) -> f64) -> (f64, f64, f64) {
    let mut v: Vec<f64> = runs.iter().map(figure).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    (median, v[0], v[v.len() - 1])
}

/// `median (min–max)`, with `digits` decimals; the median alone when all are equal.
fn cell(runs: &[RunFigures], digits: usize, figure: impl Fn(&RunFigures) -> f64) -> String {
    let (m, lo, hi) = spread(runs, figure);
    if lo == hi {
        format!("{m:.digits$}")
    } else {
        format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})")
    }
}

/// Runs every experiment and records its tables, figures and invariants.
pub async fn measure(bench: &mut Bench) -> Result<()> {
    let shape = Shape::of(bench.settings.quick);
    let mut locking: BTreeMap<&'static str, Vec<RunFigures>> = BTreeMap::new();
    let mut intake: BTreeMap<&'static str, Vec<RunFigures>> = BTreeMap::new();
    for strategy in STRATEGIES {
        eprintln!("  {SCENARIO}: {strategy}, starting its system");
        let (sys, buyers) = start(bench, strategy, shape).await?;
        let pool = sys.admin_pool().await;
        let mut runs = Vec::with_capacity(shape.locking_runs);
        for run in 1..=shape.locking_runs {
            let name = format!("{SCENARIO}: {strategy} {run}");
            let (f, summary) = locking_run(&sys, &pool, &buyers, &name, shape).await?;
            keep(bench, summary, &f);
            runs.push(f);
        }
        // The gate and the queue, on the service's own claim.
        if strategy == ClaimStrategy::UnitsSkipLocked {
            // Interleaved, so a drift of the machine falls on both alike.
            for run in 1..=shape.queue_runs {
                for (label, how) in [("gate", Intake::Gate), ("queue", Intake::Queue)] {
                    let (f, summary) =
                        intake_run(bench, &sys, &pool, &buyers, how, run, shape).await?;
                    keep(bench, summary, &f);
                    intake.entry(label).or_default().push(f);
                }
            }
        }
        locking.insert(strategy.as_str(), runs);
        pool.close().await;
        drop(sys);
    }
    record(bench, shape, &locking, &intake);
    Ok(())
}

/// One run in the report: its load phase, and what the order service and PostgreSQL
/// said of it.
fn keep(bench: &mut Bench, summary: RunSummary, f: &RunFigures) {
    let name = bench.keep(summary).name;
    for (figure, value, unit) in [
        ("units sold (PostgreSQL)", f.sold, "units"),
        ("oversold (PostgreSQL)", f.oversold, "units"),
        ("requests reaching order", f.reached_order, "requests"),
        (
            "counter row held per claim, or claim statement time",
            f.held_ms,
            "ms",
        ),
        ("counter row held in all ÷ run time", f.held_share, ""),
        ("claims per statement", f.per_statement, ""),
    ] {
        bench.report.figure(&name, figure, value, unit);
    }
}

/// A row of a table: its name, the seed's two figures, decimals, and the figure.
type Row<'a> = (
    &'a str,
    &'a str,
    &'a str,
    usize,
    &'a dyn Fn(&RunFigures) -> f64,
);

/// A table under `intro`: one line per row, its figure over `left`'s runs and over
/// `right`'s, then the seed's two figures; `columns` heads those four.
fn two_sided_table(
    intro: &str,
    columns: [&str; 4],
    rows: &[Row],
    left: &[RunFigures],
    right: &[RunFigures],
) -> String {
    let [a, b, c, d] = columns;
    let mut t = format!("{intro}\n\n| | {a} | {b} | {c} | {d} |\n|---|---:|---:|---:|---:|\n");
    for (name, seed_left, seed_right, digits, f) in rows {
        let _ = writeln!(
            t,
            "| {name} | {} | {} | {seed_left} | {seed_right} |",
            cell(left, *digits, f),
            cell(right, *digits, f)
        );
    }
    t
}

fn record(
    bench: &mut Bench,
    shape: Shape,
    locking: &BTreeMap<&'static str, Vec<RunFigures>>,
    intake: &BTreeMap<&'static str, Vec<RunFigures>>,
) {
    let none = Vec::new();
    let of = |s: ClaimStrategy| locking.get(s.as_str()).unwrap_or(&none);
    for (label, runs) in locking.iter().chain(intake.iter()) {
        let oversold: f64 = runs.iter().map(|r| r.oversold).sum();
        let over_sold_units = runs.iter().filter(|r| r.sold > shape.units as f64).count();
        bench.report.invariant(
            SCENARIO,
            &format!("{label}: none oversold, units sold ≤ stock (PostgreSQL)"),
            oversold == 0.0 && over_sold_units == 0,
            format!("{} runs, oversold {oversold}", runs.len()),
        );
        let errors: f64 = runs.iter().map(|r| r.errors).sum();
        if errors > 0.0 {
            bench
                .report
                .note(format!("{SCENARIO}: {label}: {errors} unexpected answers"));
        }
    }
    let (skip, counter) = (
        of(ClaimStrategy::UnitsSkipLocked),
        of(ClaimStrategy::CounterForUpdate),
    );
    let n = |runs: &[RunFigures]| runs.len();

    let intro = format!(
        "{} orders for {} units, {CLIENTS} clients; median (min–max) of {} runs each.",
        shape.orders,
        shape.units,
        n(skip).min(n(counter))
    );
    let rows: [Row; 9] = [
        ("order p95 (ms)", "115", "3,823", 1, &|r| r.p95_ms),
        ("order p50 (ms)", "", "", 1, &|r| r.p50_ms),
        ("order max (ms)", "", "", 1, &|r| r.max_ms),
        ("orders per second", "", "", 0, &|r| r.per_s),
        ("reservations made", "100", "100", 0, &|r| r.reserved),
        ("units sold (PostgreSQL)", "100", "100", 0, &|r| r.sold),
        ("oversold (PostgreSQL)", "0", "0", 0, &|r| r.oversold),
        (
            "time per claim statement (service) / counter row held per claim (counter), ms",
            "",
            "",
            2,
            &|r| r.held_ms,
        ),
        ("claims per statement (group commit)", "", "", 1, &|r| {
            r.per_statement
        }),
    ];
    let mut t = two_sided_table(
        &intro,
        [
            "paysaga: units `FOR UPDATE SKIP LOCKED` (service's claim)",
            "paysaga: one counter row `FOR UPDATE`",
            "seed: SKIP LOCKED",
            "seed: pessimistic lock",
        ],
        &rows,
        skip,
        counter,
    );
    let _ = writeln!(
        t,
        "| counter row held in all ÷ the run's time | | {} | | |",
        cell(counter, 2, |r| r.held_share)
    );
    bench.report.tables.push((
        "Seed 004: one stock row locked vs one row per unit".into(),
        t,
    ));

    let (gate, queue) = (
        intake.get("gate").unwrap_or(&none),
        intake.get("queue").unwrap_or(&none),
    );
    let intro = format!(
        "{} buyers arriving at once for {} units; the queue has {QUEUE_CONSUMERS} consumers; median (min–max) of {} runs each.",
        shape.orders,
        shape.units,
        n(gate).min(n(queue))
    );
    let rows: [Row; 8] = [
        (
            "requests reaching the order service",
            "100",
            "1,001",
            0,
            &|r| r.reached_order,
        ),
        ("buyer knows the answer: p50 (s)", "", "", 3, &|r| {
            r.p50_ms / 1e3
        }),
        ("buyer knows the answer: p95 (s)", "", "", 3, &|r| {
            r.p95_ms / 1e3
        }),
        ("buyer knows the answer: last (s)", "0.3", "21.9", 3, &|r| {
            r.max_ms / 1e3
        }),
        ("reservations made", "", "", 0, &|r| r.reserved),
        ("SOLD_OUT answers", "", "", 0, &|r| r.sold_out),
        ("units sold (PostgreSQL)", "", "", 0, &|r| r.sold),
        ("oversold (PostgreSQL)", "0", "0", 0, &|r| r.oversold),
    ];
    let t = two_sided_table(
        &intro,
        [
            "paysaga: gate",
            "paysaga: Redis Streams intake queue",
            "seed: gate",
            "seed: intake queue",
        ],
        &rows,
        gate,
        queue,
    );
    bench
        .report
        .tables
        .push(("Seed 004: the gate vs an intake queue".into(), t));

    let mut t = String::new();
    let _ = writeln!(
        t,
        "{} orders for {} units, {CLIENTS} clients; median (min–max) of the runs; p95 over every answer.\n",
        shape.orders, shape.units
    );
    t.push_str("| strategy | runs | orders/s | p95 (ms) | made / conflict / sold out | oversold | seed: runs | seed: RPS | seed: p95 (ms) | seed: answers |\n|---|---:|---:|---:|---|---:|---|---:|---:|---|\n");
    let seed003: [(ClaimStrategy, &str, &str, &str, &str, &str); 4] = [
        (
            ClaimStrategy::Optimistic,
            "optimistic, no retry",
            "1",
            "708.74",
            "864.96",
            "100 / 749 conflict / 151",
        ),
        (
            ClaimStrategy::OptimisticRetry,
            "optimistic, 3 tries, backoff + jitter",
            "median of 5",
            "2,109.78",
            "116.98",
            "100 / 184–222 retries used up / rest",
        ),
        (
            ClaimStrategy::CounterForUpdate,
            "pessimistic (`FOR UPDATE`)",
            "median of 5",
            "1,166.09",
            "200.80",
            "100 / 0 / 900",
        ),
        (
            ClaimStrategy::AtomicUpdate,
            "conditional `UPDATE`",
            "median of 5",
            "2,420.09",
            "225.47",
            "100 / 0 / 900",
        ),
    ];
    // A strategy's own columns: runs, orders/s, p95, the answers, oversold.
    let figures = |runs: &[RunFigures]| {
        format!(
            "{} | {} | {} | {} / {} / {} | {}",
            n(runs),
            cell(runs, 0, |r| r.per_s),
            cell(runs, 1, |r| r.p95_ms),
            cell(runs, 0, |r| r.reserved),
            cell(runs, 0, |r| r.conflict),
            cell(runs, 0, |r| r.sold_out),
            cell(runs, 0, |r| r.oversold),
        )
    };
    for (s, name, seed_runs, rps, p95, answers) in seed003 {
        let _ = writeln!(
            t,
            "| {name} | {} | {seed_runs} | {rps} | {p95} | {answers} |",
            figures(of(s))
        );
    }
    let _ = writeln!(
        t,
        "| (the service's claim, for reference) | {} | | | | |",
        figures(skip)
    );
    bench
        .report
        .tables
        .push(("Seed 003: four locking strategies".into(), t));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(p95: &[f64]) -> Vec<RunFigures> {
        p95.iter()
            .map(|&p95_ms| RunFigures {
                p95_ms,
                ..RunFigures::default()
            })
            .collect()
    }

    #[test]
    fn medians_with_their_spread() {
        assert_eq!(
            spread(&runs(&[5.0, 1.0, 3.0, 2.0, 4.0]), |r| r.p95_ms),
            (3.0, 1.0, 5.0)
        );
        assert_eq!(
            spread(&runs(&[4.0, 1.0, 3.0, 2.0]), |r| r.p95_ms),
            (2.5, 1.0, 4.0)
        );
        assert_eq!(
            cell(&runs(&[2.0, 1.0, 3.0]), 1, |r| r.p95_ms),
            "2.0 (1.0–3.0)"
        );
        assert_eq!(cell(&runs(&[7.0, 7.0, 7.0]), 0, |r| r.p95_ms), "7");
    }
}
