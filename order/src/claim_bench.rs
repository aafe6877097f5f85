//! Claim strategies compared on one database: the service's per-unit `SKIP LOCKED`
//! claim against a single counter row (`FOR UPDATE`, conditional `UPDATE`, optimistic
//! versioning) and a deliberately naive read-then-write, under the same load.
//!
//! The binary `claim-bench` is a thin wrapper; the workspace benchmark can call [`run`].

use std::{
    str::FromStr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use paysaga_common::{auth::MemberId, db};
use rand::Rng;
use sqlx::{
    postgres::PgConnectOptions, ConnectOptions, Connection, Executor, PgConnection, PgPool,
};
use uuid::Uuid;

use crate::{
    reservations::{self, Canceller, Claim, ClaimRequest},
    stock,
};

/// How a claim is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// The service's own claim: one row per unit, `FOR UPDATE SKIP LOCKED`.
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

#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// An administrator URL (any database); the bench creates and drops its own.
    pub admin_url: String,
    /// Concurrent claimers.
    pub concurrency: usize,
    /// PostgreSQL connections shared by the claimers (the server is shared, so fewer
    /// than claimers; a claimer waiting for a connection counts in its latency).
    pub connections: u32,
    /// Contended run: this many claims for `scarce_units` units.
    pub scarce_claims: usize,
    pub scarce_units: i64,
    /// Plentiful run: this many claims for `plenty_units` units.
    pub plenty_claims: usize,
    pub plenty_units: i64,
    /// Latency against stock size: claim-and-release cycles at `small_stock` and `large_stock`.
    pub cycles: usize,
    pub cycle_concurrency: usize,
    pub small_stock: i64,
    pub large_stock: i64,
    /// Skip the strategy comparison; run only the latency-against-stock cycles.
    pub only_cycles: bool,
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
        }
    }
}

/// One strategy under one load.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub scenario: String,
    pub strategy: Strategy,
    pub stock: i64,
    pub claims: usize,
    pub concurrency: usize,
    pub elapsed: Duration,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub successes: u64,
    pub sold_out: u64,
    /// Optimistic retries that ran out (the buyer got no definite answer on stock).
    pub exhausted: u64,
    /// Optimistic conflicts retried, in total.
    pub retries: u64,
    pub errors: u64,
    /// Units handed out beyond the stock, or not accounted for in it, read from the tables.
    pub oversold: i64,
}

impl RunResult {
    pub fn throughput(&self) -> f64 {
        self.claims as f64 / self.elapsed.as_secs_f64().max(1e-9)
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
            let req = ClaimRequest {
                product_id: product,
                member: &member,
                pass_id: Uuid::new_v4(),
                ttl: Duration::from_secs(600),
            };
            // The same loop the reserve handler runs: look again while locked units may come back.
            for attempt in 0..3 {
                match reservations::claim(pool, &req).await? {
                    Claim::Created(r) => {
                        return Ok(Outcome::Success {
                            retries: attempt,
                            reservation: Some(r.id),
                        })
                    }
                    Claim::PassUsed => anyhow::bail!("fresh pass id reported as used"),
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

#[derive(Default)]
struct Tally {
    successes: u64,
    sold_out: u64,
    exhausted: u64,
    retries: u64,
    errors: u64,
}

/// `concurrency` claimers take claim numbers from a shared counter until `claims` are done.
async fn drive(
    ctx: Arc<Ctx>,
    claims: usize,
    concurrency: usize,
) -> anyhow::Result<(Histogram<u64>, Tally, Duration)> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let ctx = ctx.clone();
        let next = next.clone();
        workers.push(tokio::spawn(async move {
            let mut hist =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("static bounds");
            let mut tally = Tally::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= claims {
                    break;
                }
                let t = Instant::now();
                let outcome = claim_once(&ctx, i).await;
                hist.saturating_record(t.elapsed().as_micros() as u64);
                match outcome {
                    Ok(Outcome::Success {
                        retries,
                        reservation,
                    }) => {
                        tally.successes += 1;
                        tally.retries += retries;
                        if let (true, Some(id)) = (ctx.release, reservation) {
                            if reservations::cancel(&ctx.pool, id, Canceller::Service)
                                .await
                                .is_err()
                            {
                                tally.errors += 1;
                            }
                        }
                    }
                    Ok(Outcome::SoldOut { retries }) => {
                        tally.sold_out += 1;
                        tally.retries += retries;
                    }
                    Ok(Outcome::Exhausted { retries }) => {
                        tally.exhausted += 1;
                        tally.retries += retries;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claim failed");
                        tally.errors += 1;
                    }
                }
            }
            (hist, tally)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("static bounds");
    let mut tally = Tally::default();
    for w in workers {
        let (h, t) = w.await.context("claimer panicked")?;
        hist.add(h).context("merge histograms")?;
        tally.successes += t.successes;
        tally.sold_out += t.sold_out;
        tally.exhausted += t.exhausted;
        tally.retries += t.retries;
        tally.errors += t.errors;
    }
    Ok((hist, tally, start.elapsed()))
}

/// A stock of `units` for the strategy: a product with unit rows, or a counter row.
async fn prepare(pool: &PgPool, strategy: Strategy, units: i64) -> anyhow::Result<i64> {
    if strategy == Strategy::SkipLockedUnits {
        let mut id = None;
        let mut left = units;
        while left > 0 || id.is_none() {
            let batch = left.min(stock::MAX_UNITS_PER_CALL);
            id = Some(match id {
                None => stock::create_product(pool, "bench", 100, batch).await?.id,
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

#[allow(clippy::too_many_arguments)]
async fn measure(
    pool: &PgPool,
    scenario: &str,
    strategy: Strategy,
    units: i64,
    claims: usize,
    concurrency: usize,
    release: bool,
) -> anyhow::Result<RunResult> {
    let product_id = prepare(pool, strategy, units).await?;
    let ctx = Arc::new(Ctx {
        pool: pool.clone(),
        strategy,
        product_id,
        release,
    });
    let (hist, tally, elapsed) = drive(ctx, claims, concurrency).await?;
    let oversold = oversold(pool, strategy, product_id, units).await?;
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    Ok(RunResult {
        scenario: scenario.to_owned(),
        strategy,
        stock: units,
        claims,
        concurrency,
        elapsed,
        p50_ms: ms(0.50),
        p95_ms: ms(0.95),
        p99_ms: ms(0.99),
        successes: tally.successes,
        sold_out: tally.sold_out,
        exhausted: tally.exhausted,
        retries: tally.retries,
        errors: tally.errors,
        oversold,
    })
}

/// A database of the bench's own, dropped when done (also on failure).
struct BenchDb {
    admin: String,
    name: String,
}

impl BenchDb {
    async fn create(admin: &str) -> anyhow::Result<Self> {
        let name = format!("claim_bench_{}", Uuid::new_v4().simple());
        db::create_database(admin, &name).await?;
        let this = Self {
            admin: admin.to_owned(),
            name,
        };
        db::bootstrap(&this.url()?).await?;
        Ok(this)
    }

    fn url(&self) -> anyhow::Result<String> {
        let opts = PgConnectOptions::from_str(&self.admin)?;
        Ok(format!(
            "postgres://{}@{}:{}/{}",
            opts.get_username(),
            opts.get_host(),
            opts.get_port(),
            self.name
        ))
    }

    async fn drop_now(&self) -> anyhow::Result<()> {
        let opts = PgConnectOptions::from_str(&self.admin)?
            .database("postgres")
            .disable_statement_logging();
        let mut conn = PgConnection::connect_with(&opts).await?;
        conn.execute(format!(r#"DROP DATABASE IF EXISTS "{}" WITH (FORCE)"#, self.name).as_str())
            .await?;
        conn.close().await?;
        Ok(())
    }
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
        tracing::warn!(error = %e, db = %bench_db.name, "could not drop the bench database");
    }
    result
}

async fn run_on(
    bench_db: &BenchDb,
    cfg: &BenchConfig,
    progress: &mut impl FnMut(&RunResult),
) -> anyhow::Result<Vec<RunResult>> {
    // As the service's own role, with its own migrations: the claim is the real one.
    let url = db::role_url(&bench_db.url()?, "order_app")?;
    let pool = db::connect(&url, crate::SCHEMA, cfg.connections).await?;
    db::migrate(&pool, &crate::MIGRATOR).await?;
    pool.execute(
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

    let mut rows = Vec::new();
    let strategies: &[Strategy] = if cfg.only_cycles { &[] } else { &Strategy::ALL };
    let scarce = format!(
        "{} claims for {} units",
        cfg.scarce_claims, cfg.scarce_units
    );
    for &s in strategies {
        let r = measure(
            &pool,
            &scarce,
            s,
            cfg.scarce_units,
            cfg.scarce_claims,
            cfg.concurrency,
            false,
        )
        .await?;
        progress(&r);
        rows.push(r);
    }
    let plenty = format!(
        "{} claims for {} units",
        cfg.plenty_claims, cfg.plenty_units
    );
    for &s in strategies {
        let r = measure(
            &pool,
            &plenty,
            s,
            cfg.plenty_units,
            cfg.plenty_claims,
            cfg.concurrency,
            false,
        )
        .await?;
        progress(&r);
        rows.push(r);
    }
    // Small stock again after the large one, so an order effect (warm-up, autovacuum,
    // other load on the machine) would show as two different small-stock rows.
    for units in [cfg.small_stock, cfg.large_stock, cfg.small_stock] {
        let scenario = format!("claim+release cycles, stock {units}");
        let r = measure(
            &pool,
            &scenario,
            Strategy::SkipLockedUnits,
            units,
            cfg.cycles,
            cfg.cycle_concurrency,
            true,
        )
        .await?;
        progress(&r);
        rows.push(r);
    }
    pool.close().await;
    Ok(rows)
}

/// The results as a Markdown table.
pub fn markdown(rows: &[RunResult]) -> String {
    let mut out = String::from(
        "| scenario | strategy | claimers | answers/s | p50 ms | p95 ms | p99 ms | successes | sold out | retries exhausted (retries) | errors | oversold |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {} ({}) | {} | {} |\n",
            r.scenario,
            r.strategy.name(),
            r.concurrency,
            r.throughput(),
            r.p50_ms,
            r.p95_ms,
            r.p99_ms,
            r.successes,
            r.sold_out,
            r.exhausted,
            r.retries,
            r.errors,
            r.oversold,
        ));
    }
    out
}
