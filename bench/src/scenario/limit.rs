//! Part 10: the database's own limit for a checkout's work. The SQL-only checkout of
//! `bench/sql/limit_checkout.sql` is called straight from the bench, on the same server
//! in the same run, and paysaga's whole checkouts (part 6) are reported as a fraction of
//! its batched figure.

use std::{sync::Arc, time::Duration};

use sqlx::PgPool;

use crate::{
    error::Result,
    load::{self, Load, Outcome},
    stats::RunSummary,
    Bench,
};

/// The limit's tables and its one function, published with the figures.
const SQL: &str = include_str!("../../sql/limit_checkout.sql");
/// What one checkout costs the buyer; accounts are funded for exactly one.
const PRICE: i64 = 1_000;
/// Upper bound on one shape's phase, so a stuck server cannot hang the run.
const PHASE_TIME_BOUND: Duration = Duration::from_secs(300);

/// One way of calling the function: buyers per call, and calls in flight.
#[derive(Debug, Clone, Copy)]
struct Shape {
    batch: usize,
    clients: usize,
    /// Calls made, each with `batch` buyers of their own.
    calls: u64,
}

/// The batched figure paysaga is compared with (32 buyers per call from 4 clients: more
/// clients only queue on 2 cores), then one buyer per transaction at 64 clients, as a
/// service without group commit would do it.
fn shapes(quick: bool) -> [Shape; 2] {
    let scale = if quick { 10 } else { 1 };
    [
        Shape {
            batch: 32,
            clients: 4,
            calls: 600 / scale,
        },
        Shape {
            batch: 1,
            clients: 64,
            calls: 6_000 / scale,
        },
    ]
}

/// Runs both shapes on a schema of their own, checks their books, and reports paysaga's
/// checkout levels (if part 6 ran) against the batched figure.
pub async fn measure(bench: &mut Bench) -> Result<()> {
    let pool = bench.db.admin_pool(64).await?;
    sqlx::raw_sql(SQL).execute(&pool).await?;
    let scenario = "10 SQL limit";
    let mut batched = None;
    for (product, shape) in (1_i64..).zip(shapes(bench.settings.quick)) {
        let first = seed(&pool, product, shape).await?;
        let name = format!(
            "{scenario}: {} per call, {} clients",
            shape.batch, shape.clients
        );
        let summary = calls(&pool, &name, shape, product, first, bench.settings.progress).await;
        let summary = bench.keep(summary);
        let checkouts = summary.count("ok") * shape.batch as u64;
        let per_s = checkouts as f64 / summary.elapsed_s;
        bench
            .report
            .figure(&name, "checkouts per second", per_s, "checkouts/s");
        bench.report.figure(
            &name,
            "call latency p95",
            summary.latency.p95_us as f64 / 1_000.0,
            "ms",
        );
        books(bench, &pool, &name, product, checkouts).await?;
        if shape.batch > 1 {
            batched = Some(per_s);
        }
    }
    pool.close().await;
    if let Some(limit) = batched {
        let rows: Vec<(usize, f64)> = bench
            .report
            .checkout
            .iter()
            .map(|r| (r.clients, r.checkouts_per_s))
            .collect();
        for (clients, per_s) in rows {
            bench.report.ratio(
                &format!("checkout, {clients} clients ÷ the SQL limit"),
                per_s,
                "SQL-only checkout, 32 per call",
                limit,
            );
        }
    }
    Ok(())
}

/// Accounts and units for one shape (ids from the returned first), one of each per
/// checkout.
async fn seed(pool: &PgPool, product: i64, shape: Shape) -> Result<i64> {
    let n = shape.calls as i64 * shape.batch as i64;
    let first = product * 10_000_000;
    sqlx::query(
        r#"WITH accounts AS (
               INSERT INTO bench_limit.accounts (id, balance)
               SELECT g, $3 FROM generate_series($1, $1 + $2 - 1) AS g
           )
           INSERT INTO bench_limit.units (id, product_id)
           SELECT g, $4 FROM generate_series($1, $1 + $2 - 1) AS g"#,
    )
    .bind(first)
    .bind(n)
    .bind(PRICE)
    .bind(product)
    .execute(pool)
    .await?;
    sqlx::query(r#"ANALYZE bench_limit.accounts, bench_limit.units"#)
        .execute(pool)
        .await?;
    Ok(first)
}

/// `shape.calls` calls, call `i` checking out buyers `first + i * batch ..`.
async fn calls(
    pool: &PgPool,
    name: &str,
    shape: Shape,
    product: i64,
    first: i64,
    progress: bool,
) -> RunSummary {
    let load = Load {
        show_progress: progress,
        ..Load::new(name, shape.clients, shape.calls, PHASE_TIME_BOUND)
    };
    let pool = Arc::new(pool.clone());
    load::run(&load, move |ctx| {
        let pool = pool.clone();
        async move {
            let from = first + ctx.seq as i64 * shape.batch as i64;
            let buyers: Vec<i64> = (from..from + shape.batch as i64).collect();
            let keys: Vec<String> = buyers.iter().map(|b| format!("limit:{b}")).collect();
            let done: sqlx::Result<i32> =
                sqlx::query_scalar(r#"SELECT bench_limit.checkout($1, $2, $3, $4)"#)
                    .bind(&buyers)
                    .bind(&keys)
                    .bind(product)
                    .bind(PRICE)
                    .fetch_one(pool.as_ref())
                    .await;
            match done {
                Ok(_) => Outcome::ok(),
                Err(_) => Outcome::of("error:database"),
            }
        }
    })
    .await
}

/// The limit did the whole work, and only once: as many units sold, ledger rows and
/// checkouts as checkouts counted, each paid exactly once.
async fn books(
    bench: &mut Bench,
    pool: &PgPool,
    scenario: &str,
    product: i64,
    checkouts: u64,
) -> Result<()> {
    let (sold, rows, recorded, paid): (i64, i64, i64, i64) = sqlx::query_as(
        r#"SELECT (SELECT COUNT(*) FROM bench_limit.units WHERE product_id = $1 AND state = 'SOLD'),
                  (SELECT COUNT(*) FROM bench_limit.ledger l
                   JOIN bench_limit.checkouts c USING (operation_key)
                   JOIN bench_limit.units u ON u.id = c.unit_id WHERE u.product_id = $1),
                  (SELECT COUNT(*) FROM bench_limit.checkouts c
                   JOIN bench_limit.units u ON u.id = c.unit_id WHERE u.product_id = $1),
                  (SELECT COUNT(*) FROM bench_limit.accounts
                   WHERE id BETWEEN $1 * 10000000 AND $1 * 10000000 + 9999999 AND balance = 0)"#,
    )
    .bind(product)
    .fetch_one(pool)
    .await?;
    let n = checkouts as i64;
    bench.report.invariant(
        scenario,
        "SQL limit: every checkout sold one unit, wrote one ledger row, debited once",
        (sold, rows, recorded, paid) == (n, n, n, n),
        format!("{n} checkouts: {sold} units sold, {rows} ledger rows, {recorded} recorded, {paid} accounts paid"),
    );
    Ok(())
}
