//! Claim strategies compared on one database: the order service's per-unit `SKIP LOCKED`
//! claim against a single counter row (`FOR UPDATE`, conditional `UPDATE`, optimistic
//! versioning) and a deliberately naive read-then-write, under the shared closed-loop
//! driver. The binary `claim-bench` prints it; the main run folds it in as scenario 3.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use clap::Args;
use order::{
    claim::{self, Claim, NewClaim},
    settle::{self, Canceller, Op},
    stock,
};
use paysaga_common::{auth::MemberId, db};
use rand::Rng;
use sqlx::{Executor, PgPool};
use uuid::Uuid;

use crate::{
    benchdb::BenchDb,
    load::{self, Answer, Load, Outcome as Label},
    stats::RunSummary,
};

/// How a claim is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// The service's own claim statement (a claim of one): one row per unit,
    /// `FOR UPDATE SKIP LOCKED`.
    SkipLockedUnits,
    /// One counter row: `SELECT ... FOR UPDATE`, then `UPDATE`, in a transaction.
    CounterForUpdate,
    /// One counter row: `UPDATE ... SET stock = stock - 1 WHERE stock > 0`.
    ConditionalUpdate,
    /// One counter row with a version: read, then update if unchanged; retry on conflict.
    OptimisticVersion,
    /// Read the stock, write back `read - 1`, no lock: loses updates and oversells.
    NaiveReadThenWrite,
}

impl Strategy {
    pub const ALL: [Strategy; 5] = [
        Strategy::SkipLockedUnits,
        Strategy::CounterForUpdate,
        Strategy::ConditionalUpdate,
        Strategy::OptimisticVersion,
        Strategy::NaiveReadThenWrite,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::SkipLockedUnits => "unit rows, FOR UPDATE SKIP LOCKED",
            Strategy::CounterForUpdate => "counter row, SELECT ... FOR UPDATE",
            Strategy::ConditionalUpdate => "counter row, UPDATE ... WHERE stock > 0",
            Strategy::OptimisticVersion => "counter row, optimistic version + retries",
            Strategy::NaiveReadThenWrite => "naive read-then-write (no lock)",
        }
    }
}

/// Attempts an optimistic claimer makes before giving up on a conflict.
pub const OPTIMISTIC_ATTEMPTS: u32 = 5;

/// `claim-bench`'s settings.
#[derive(Debug, Clone, Args)]
pub struct BenchConfig {
    /// An administrator URL (any database); the bench creates and drops its own.
    #[arg(
        long,
        env = "TEST_ADMIN_DATABASE_URL",
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    pub admin_url: String,
    /// Concurrent claimers.
    #[arg(long, default_value_t = 100)]
    pub concurrency: usize,
    /// PostgreSQL connections shared by the claimers (the server is shared, so fewer
    /// than claimers; a claimer waiting for a connection counts in its latency).
    #[arg(long, default_value_t = 40)]
    pub connections: u32,
    /// Contended run: this many claims ...
    #[arg(long, default_value_t = 1_000)]
    pub scarce_claims: u64,
    /// ... for this many units.
    #[arg(long, default_value_t = 100)]
    pub scarce_units: i64,
    /// Plentiful run: this many claims ...
    #[arg(long, default_value_t = 2_000)]
    pub plenty_claims: u64,
    /// ... for this many units.
    #[arg(long, default_value_t = 100_000)]
    pub plenty_units: i64,
    /// Claim-and-release cycles per stock size, for latency against stock.
    #[arg(long, default_value_t = 2_000)]
    pub cycles: u64,
    /// Concurrent claimers in the cycles.
    #[arg(long, default_value_t = 50)]
    pub cycle_concurrency: usize,
    /// The small stock of the cycles.
    #[arg(long, default_value_t = 100)]
    pub small_stock: i64,
    /// The large stock of the cycles.
    #[arg(long, default_value_t = 1_000_000)]
    pub large_stock: i64,
    /// Skip the strategy comparison; run only the latency-against-stock cycles.
    #[arg(long)]
    pub only_cycles: bool,
    /// Progress bars while a row runs (hidden anyway when stderr is not a terminal).
    #[arg(skip = true)]
    pub progress: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            admin_url: "postgres://postgres:postgres@127.0.0.1:5432/postgres".into(),
            concurrency: 100,
            connections: 40,
            scarce_claims: 1_000,
            scarce_units: 100,
            plenty_claims: 2_000,
            plenty_units: 100_000,
            cycles: 2_000,
            cycle_concurrency: 50,
            small_stock: 100,
            large_stock: 1_000_000,
            only_cycles: false,
            progress: true,
        }
    }
}

/// One strategy under one load.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub scenario: String,
    pub strategy: Strategy,
    pub stock: i64,
    /// Outcomes `claimed`, `sold_out`, `retries_exhausted` (an optimistic claimer gave up:
    /// no definite answer on stock) and errors; latency is the claim's alone.
    pub summary: RunSummary,
    /// Optimistic conflicts retried, in total.
    pub retries: u64,
    /// Units handed out beyond the stock, or not accounted for in it, read from the tables.
    pub oversold: i64,
}

impl RunResult {
    pub fn p95_ms(&self) -> f64 {
        self.summary.latency.p95_us as f64 / 1_000.0
    }
}

enum Outcome {
    Success {
        retries: u64,
        reservation: Option<Uuid>,
    },
    SoldOut {
        retries: u64,
    },
    Exhausted {
        retries: u64,
    },
}

struct Ctx {
    pool: PgPool,
    strategy: Strategy,
    product_id: i64,
    /// Release each successful claim right away (latency-vs-stock runs keep stock level).
    release: bool,
}

async fn claim_once(ctx: &Ctx, i: usize) -> anyhow::Result<Outcome> {
    let pool = &ctx.pool;
    let product = ctx.product_id;
    let member = format!("bench-{i}");
    match ctx.strategy {
        Strategy::SkipLockedUnits => {
            let member = MemberId::parse(member).map_err(anyhow::Error::msg)?;
            let req = [NewClaim::unfunded(
                product,
                member,
                Uuid::new_v4(),
                Duration::from_secs(600),
                1,
            )];
            // The same loop the reserve handler runs: look again while locked units may
            // come back. Each claimer its own statement (a claim of one), as a lone claim.
            for attempt in 0..3 {
                let outcome = claim::claim(pool, &req)
                    .await?
                    .pop()
                    .context("a claim of one answered nothing")??;
                match outcome {
                    Claim::Created(r) => {
                        return Ok(Outcome::Success {
                            retries: attempt,
                            reservation: Some(r.id),
                        })
                    }
                    Claim::PassUsed => anyhow::bail!("fresh pass id reported as used"),
                    Claim::MemberLimit => anyhow::bail!("a fresh member reported over its limit"),
                    Claim::TooLate => anyhow::bail!("a claim without a window reported too late"),
                    Claim::Contended => {
                        anyhow::bail!("the default claim reported a version conflict")
                    }
                    Claim::NothingClaimable => {
                        if stock::probe(pool, product).await? != Some(true) {
                            return Ok(Outcome::SoldOut { retries: attempt });
                        }
                    }
                }
            }
            Ok(Outcome::SoldOut { retries: 3 })
        }
        Strategy::CounterForUpdate => {
            let mut tx = pool.begin().await?;
            let stock: i64 = sqlx::query_scalar(
                r#"SELECT stock FROM bench_counter WHERE product_id = $1 FOR UPDATE"#,
            )
            .bind(product)
            .fetch_one(&mut *tx)
            .await?;
            if stock <= 0 {
                tx.rollback().await?;
                return Ok(Outcome::SoldOut { retries: 0 });
            }
            sqlx::query(r#"UPDATE bench_counter SET stock = stock - 1 WHERE product_id = $1"#)
                .bind(product)
                .execute(&mut *tx)
                .await?;
            sqlx::query(r#"INSERT INTO bench_claims (product_id, member_id) VALUES ($1, $2)"#)
                .bind(product)
                .bind(&member)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Outcome::Success {
                retries: 0,
                reservation: None,
            })
        }
        Strategy::ConditionalUpdate => {
            let claimed: Option<i64> = sqlx::query_scalar(
                r#"
                WITH taken AS (
                    UPDATE bench_counter SET stock = stock - 1
                    WHERE product_id = $1 AND stock > 0
                    RETURNING product_id
                )
                INSERT INTO bench_claims (product_id, member_id)
                SELECT product_id, $2 FROM taken
                RETURNING id
                "#,
            )
            .bind(product)
            .bind(&member)
            .fetch_optional(pool)
            .await?;
            Ok(match claimed {
                Some(_) => Outcome::Success {
                    retries: 0,
                    reservation: None,
                },
                None => Outcome::SoldOut { retries: 0 },
            })
        }
        Strategy::OptimisticVersion => {
            for attempt in 0..OPTIMISTIC_ATTEMPTS {
                let (stock, version): (i64, i64) = sqlx::query_as(
                    r#"SELECT stock, version FROM bench_counter WHERE product_id = $1"#,
                )
                .bind(product)
                .fetch_one(pool)
                .await?;
                if stock <= 0 {
                    return Ok(Outcome::SoldOut {
                        retries: u64::from(attempt),
                    });
                }
                let claimed: Option<i64> = sqlx::query_scalar(
                    r#"
                    WITH taken AS (
                        UPDATE bench_counter SET stock = stock - 1, version = version + 1
                        WHERE product_id = $1 AND version = $2
                        RETURNING product_id
                    )
                    INSERT INTO bench_claims (product_id, member_id)
                    SELECT product_id, $3 FROM taken
                    RETURNING id
                    "#,
                )
                .bind(product)
                .bind(version)
                .bind(&member)
                .fetch_optional(pool)
                .await?;
                if claimed.is_some() {
                    return Ok(Outcome::Success {
                        retries: u64::from(attempt),
                        reservation: None,
                    });
                }
                let backoff_us = rand::thread_rng().gen_range(0..500 * (1u64 << attempt));
                tokio::time::sleep(Duration::from_micros(backoff_us)).await;
            }
            Ok(Outcome::Exhausted {
                retries: u64::from(OPTIMISTIC_ATTEMPTS - 1),
            })
        }
        Strategy::NaiveReadThenWrite => {
            let stock: i64 =
                sqlx::query_scalar(r#"SELECT stock FROM bench_counter WHERE product_id = $1"#)
                    .bind(product)
                    .fetch_one(pool)
                    .await?;
            if stock <= 0 {
                return Ok(Outcome::SoldOut { retries: 0 });
            }
            sqlx::query(r#"UPDATE bench_counter SET stock = $2 WHERE product_id = $1"#)
                .bind(product)
                .bind(stock - 1)
                .execute(pool)
                .await?;
            sqlx::query(r#"INSERT INTO bench_claims (product_id, member_id) VALUES ($1, $2)"#)
                .bind(product)
                .bind(&member)
                .execute(pool)
                .await?;
            Ok(Outcome::Success {
                retries: 0,
                reservation: None,
            })
        }
    }
}

/// `concurrency` claimers take claim numbers from the shared driver until `claims` are
/// done. A released claim is cancelled after its latency is taken, so the figure is the
/// claim's own.
async fn drive(
    ctx: Arc<Ctx>,
    name: &str,
    claims: u64,
    concurrency: usize,
    progress: bool,
) -> (RunSummary, u64) {
    let load = Load {
        show_progress: progress,
        ..Load::new(name, concurrency, claims, Duration::from_secs(3600))
    };
    let retries = Arc::new(AtomicU64::new(0));
    let r = retries.clone();
    let summary = load::run(&load, move |c| {
        let (ctx, retries) = (ctx.clone(), r.clone());
        async move {
            let t = Instant::now();
            let outcome = claim_once(&ctx, c.seq as usize).await;
            let took = t.elapsed();
            let (label, tried) = match outcome {
                Ok(Outcome::Success {
                    retries,
                    reservation,
                }) => {
                    if let (true, Some(id)) = (ctx.release, reservation) {
                        if let Err(e) =
                            settle::one(&ctx.pool, Op::Cancel(id, Canceller::Service)).await
                        {
                            tracing::warn!(error = %e, "release failed");
                            return Answer::from(Label::error("release"));
                        }
                    }
                    (Label::of("claimed"), retries)
                }
                Ok(Outcome::SoldOut { retries }) => (Label::of("sold_out"), retries),
                Ok(Outcome::Exhausted { retries }) => (Label::of("retries_exhausted"), retries),
                Err(e) => {
                    tracing::warn!(error = %e, "claim failed");
                    (Label::error("claim"), 0)
                }
            };
            retries.fetch_add(tried, Ordering::Relaxed);
            label.timed(took)
        }
    })
    .await;
    (summary, retries.load(Ordering::Relaxed))
}

/// A stock of `units` for the strategy: a product with unit rows, or a counter row.
async fn prepare(pool: &PgPool, strategy: Strategy, units: i64) -> anyhow::Result<i64> {
    if strategy == Strategy::SkipLockedUnits {
        let mut id = None;
        let mut left = units;
        while left > 0 || id.is_none() {
            let batch = left.min(stock::MAX_UNITS_PER_CALL);
            id = Some(match id {
                None => {
                    let new = stock::NewProduct {
                        name: "bench",
                        price: 100,
                        units: batch,
                        reservation_ttl_secs: None,
                        eligibility: &[],
                    };
                    stock::create_product(pool, &new).await?.id
                }
                Some(id) => {
                    stock::add_units(pool, id, batch)
                        .await?
                        .context("product vanished")?
                        .id
                }
            });
            left -= batch;
        }
        sqlx::query("ANALYZE product_stock").execute(pool).await?;
        return id.context("no product");
    }
    let id: i64 = sqlx::query_scalar(
        r#"INSERT INTO bench_counter (stock, version) VALUES ($1, 0) RETURNING product_id"#,
    )
    .bind(units)
    .fetch_one(pool)
    .await?;
    Ok(id)
}

/// Units handed out that the stock cannot account for, read from the tables.
async fn oversold(
    pool: &PgPool,
    strategy: Strategy,
    product: i64,
    units: i64,
) -> anyhow::Result<i64> {
    if strategy == Strategy::SkipLockedUnits {
        let (live, distinct_units): (i64, i64) = sqlx::query_as(
            r#"
            SELECT COUNT(*), COUNT(DISTINCT unit_id)
            FROM reservations
            WHERE product_id = $1 AND state IN ('RESERVED', 'CONFIRMED')
            "#,
        )
        .bind(product)
        .fetch_one(pool)
        .await?;
        return Ok((live - units).max(0) + (live - distinct_units));
    }
    let (claimed, remaining): (i64, i64) = sqlx::query_as(
        r#"
        SELECT (SELECT COUNT(*) FROM bench_claims WHERE product_id = $1),
               (SELECT stock FROM bench_counter WHERE product_id = $1)
        "#,
    )
    .bind(product)
    .fetch_one(pool)
    .await?;
    // Beyond the stock, or beyond what the counter was decremented by (lost updates).
    Ok((claimed - units).max(claimed - (units - remaining)).max(0))
}

/// One row: what it measures, and how.
struct Row<'a> {
    scenario: &'a str,
    strategy: Strategy,
    units: i64,
    claims: u64,
    concurrency: usize,
    release: bool,
}

async fn measure(pool: &PgPool, row: Row<'_>, progress: bool) -> anyhow::Result<RunResult> {
    let product_id = prepare(pool, row.strategy, row.units).await?;
    let ctx = Arc::new(Ctx {
        pool: pool.clone(),
        strategy: row.strategy,
        product_id,
        release: row.release,
    });
    let name = format!("3 claims: {}: {}", row.scenario, row.strategy.name());
    let (summary, retries) = drive(ctx, &name, row.claims, row.concurrency, progress).await;
    let oversold = oversold(pool, row.strategy, product_id, row.units).await?;
    Ok(RunResult {
        scenario: row.scenario.to_owned(),
        strategy: row.strategy,
        stock: row.units,
        summary,
        retries,
        oversold,
    })
}

/// Runs every comparison on a fresh database and drops it. `progress` hears each row as
/// it completes.
pub async fn run(
    cfg: &BenchConfig,
    mut progress: impl FnMut(&RunResult),
) -> anyhow::Result<Vec<RunResult>> {
    let bench_db = BenchDb::create(&cfg.admin_url).await?;
    let result = run_on(&bench_db, cfg, &mut progress).await;
    if let Err(e) = bench_db.drop_now().await {
        tracing::warn!(error = %e, "could not drop the claim bench database");
    }
    result
}

async fn run_on(
    bench_db: &BenchDb,
    cfg: &BenchConfig,
    progress: &mut impl FnMut(&RunResult),
) -> anyhow::Result<Vec<RunResult>> {
    // As the service's own role, with its own migrations: the claim is the real one.
    // The alternatives' tables are made by the schema's owner, as a migration would,
    // and the second migrate run grants the service role its rights on them.
    let migrator_url = bench_db.role_url("order_migrator")?;
    db::migrate(&migrator_url, order::SCHEMA, &order::MIGRATOR).await?;
    let owner = db::connect(&migrator_url, order::SCHEMA, 1).await?;
    owner
        .execute(
            r#"
        CREATE TABLE bench_counter (
            product_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            stock      BIGINT NOT NULL,
            version    BIGINT NOT NULL
        );
        CREATE TABLE bench_claims (
            id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            product_id BIGINT NOT NULL,
            member_id  TEXT   NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        "#,
        )
        .await?;
    owner.close().await;
    db::migrate(&migrator_url, order::SCHEMA, &order::MIGRATOR).await?;
    let url = bench_db.role_url("order_app")?;
    let pool = db::connect(&url, order::SCHEMA, cfg.connections).await?;

    let mut rows = Vec::new();
    let strategies: &[Strategy] = if cfg.only_cycles { &[] } else { &Strategy::ALL };
    let scarce = format!(
        "{} claims for {} units",
        cfg.scarce_claims, cfg.scarce_units
    );
    let plenty = format!(
        "{} claims for {} units",
        cfg.plenty_claims, cfg.plenty_units
    );
    let mut plan = Vec::new();
    for (scenario, units, claims) in [
        (&scarce, cfg.scarce_units, cfg.scarce_claims),
        (&plenty, cfg.plenty_units, cfg.plenty_claims),
    ] {
        for &strategy in strategies {
            plan.push((
                scenario.clone(),
                strategy,
                units,
                claims,
                cfg.concurrency,
                false,
            ));
        }
    }
    // Small stock again after the large one, so an order effect (warm-up, autovacuum,
    // other load on the machine) would show as two different small-stock rows.
    for units in [cfg.small_stock, cfg.large_stock, cfg.small_stock] {
        plan.push((
            format!("claim+release cycles, stock {units}"),
            Strategy::SkipLockedUnits,
            units,
            cfg.cycles,
            cfg.cycle_concurrency,
            true,
        ));
    }
    for (scenario, strategy, units, claims, concurrency, release) in plan {
        let row = Row {
            scenario: &scenario,
            strategy,
            units,
            claims,
            concurrency,
            release,
        };
        let r = measure(&pool, row, cfg.progress).await?;
        progress(&r);
        rows.push(r);
    }
    pool.close().await;
    Ok(rows)
}

/// The rows as the shared load table, then what is particular to claims.
pub fn markdown(rows: &[RunResult]) -> String {
    let summaries: Vec<RunSummary> = rows.iter().map(|r| r.summary.clone()).collect();
    let mut out = crate::stats::markdown_table(&summaries);
    out.push_str(
        "\n| scenario | strategy | stock | optimistic retries | oversold |\n|---|---|---:|---:|---:|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            r.scenario,
            r.strategy.name(),
            r.stock,
            r.retries,
            r.oversold,
        ));
    }
    out
}

/// The `claim-bench` binary: its flags, the run, the markdown on stdout.
pub async fn main() -> anyhow::Result<()> {
    let cfg: BenchConfig = super::start(
        "claim-bench",
        "The order service's claim against counter-row alternatives, on one database.",
    );
    eprintln!(
        "claim-bench: {} claimers over {} PostgreSQL connections; large stock {}",
        cfg.concurrency, cfg.connections, cfg.large_stock
    );
    let rows = run(&cfg, |r| eprintln!("{}", r.summary.line())).await?;
    println!("{}", markdown(&rows));
    let cycles = |stock: i64| {
        rows.iter()
            .rev()
            .find(|r| r.stock == stock && r.scenario.starts_with("claim+release"))
    };
    if let (Some(s), Some(l)) = (cycles(cfg.small_stock), cycles(cfg.large_stock)) {
        println!(
            "SKIP LOCKED claim p95: {:.2} ms at {} units vs {:.2} ms at {} units",
            s.p95_ms(),
            s.stock,
            l.p95_ms(),
            l.stock
        );
    }
    Ok(())
}
