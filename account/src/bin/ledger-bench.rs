//! Debits per second through the real account service with many concurrent, distinct
//! buyers: once with the merchant balance on one row, once spread over sixteen, to show
//! whether the merchant side serialises payments. Each run gets a fresh database, which
//! is dropped afterwards. Numbers are printed; nothing is asserted on time.
//!
//! `cargo run --release -p account --bin ledger-bench -- [--seconds 5] [--concurrency 64]
//! [--buyers 2000] [--shards 1,16] [--pool 32]`; `BENCH_ADMIN_DATABASE_URL` names an
//! administrator connection (default `postgres://postgres:postgres@127.0.0.1:5432/postgres`).

use std::{
    str::FromStr,
    sync::Arc,
    time::{Duration, Instant},
};

use account::{
    api::{DebitRequest, OpenAccountRequest, OperationKey},
    AccountClient, Config,
};
use anyhow::{bail, Context};
use futures::{stream, StreamExt, TryStreamExt};
use paysaga_common::{
    auth::{MemberId, Minter},
    client::CallError,
    db,
    money::Amount,
};
use sqlx::{
    postgres::PgConnectOptions, ConnectOptions, Connection, Executor, PgConnection, PgPool,
};
use tokio::{net::TcpListener, sync::oneshot};

const PRICE: i64 = 1_299;
const OPENING: i64 = 1_000_000_000;

struct Args {
    seconds: u64,
    concurrency: usize,
    buyers: usize,
    shards: Vec<u16>,
    pool: u32,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        seconds: 5,
        concurrency: 64,
        buyers: 2000,
        shards: vec![1, 16],
        pool: 32,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--seconds" => args.seconds = value.parse()?,
            "--concurrency" => args.concurrency = value.parse()?,
            "--buyers" => args.buyers = value.parse()?,
            "--pool" => args.pool = value.parse()?,
            "--shards" => {
                args.shards = value
                    .split(',')
                    .map(|s| s.trim().parse::<u16>())
                    .collect::<Result<_, _>>()?;
                if args
                    .shards
                    .iter()
                    .any(|&s| s == 0 || s > account::config::MAX_MERCHANT_SHARDS)
                {
                    bail!(
                        "--shards values must be 1-{}",
                        account::config::MAX_MERCHANT_SHARDS
                    );
                }
            }
            other => bail!("unknown flag {other}"),
        }
    }
    if args.concurrency == 0 || args.buyers == 0 || args.seconds == 0 {
        bail!("--seconds, --concurrency and --buyers must be positive");
    }
    Ok(args)
}

struct RunResult {
    shards: u16,
    applied: u64,
    failed: u64,
    elapsed: Duration,
    latencies_us: Vec<u64>,
    lock_waiters_avg: f64,
    lock_waiters_max: i64,
    invariant_ok: bool,
}

fn database_url(admin: &str, name: &str) -> String {
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(admin);
    format!("{base}/{name}")
}

async fn drop_database(admin: &str, name: &str) -> anyhow::Result<()> {
    let opts = PgConnectOptions::from_str(admin)?
        .database("postgres")
        .disable_statement_logging();
    let mut conn = PgConnection::connect_with(&opts).await?;
    conn.execute(format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#).as_str())
        .await?;
    conn.close().await?;
    Ok(())
}

async fn run_once(admin: &str, shards: u16, args: &Args) -> anyhow::Result<RunResult> {
    let name = format!(
        "ledger_bench_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    db::create_database(admin, &name)
        .await
        .context("creating the bench database")?;
    let result = measure(admin, &name, shards, args).await;
    drop_database(admin, &name)
        .await
        .context("dropping the bench database")?;
    result
}

async fn measure(admin: &str, name: &str, shards: u16, args: &Args) -> anyhow::Result<RunResult> {
    let url = database_url(admin, name);
    db::bootstrap(&url)
        .await
        .context("bootstrapping roles and schemas")?;
    let mut config = Config::with_database(db::role_url(&url, "account_app")?);
    config.merchant_shards = shards;
    config.db_max_connections = args.pool;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(account::run(config, listener, async move {
        let _ = stopped.await;
    }));
    let ready = reqwest::get(format!("{base}/readyz"))
        .await
        .context("service did not come up")?;
    if !ready.status().is_success() {
        bail!("service not ready: {}", ready.status());
    }

    let token = Minter::dev_service().mint("ledger-bench", Duration::from_secs(3600));
    let client = AccountClient::new(&base, token, Duration::from_secs(30));
    let buyers: Vec<i64> = stream::iter(0..args.buyers)
        .map(|i| {
            let client = client.clone();
            async move {
                let req = OpenAccountRequest {
                    member_id: MemberId::parse(format!("bench-{i}")).map_err(anyhow::Error::msg)?,
                    opening_balance: OPENING,
                };
                client
                    .open_account(&req)
                    .await
                    .map(|a| a.body.id)
                    .map_err(anyhow::Error::from)
            }
        })
        .buffer_unordered(32)
        .try_collect()
        .await?;
    let buyers = Arc::new(buyers);

    let admin_pool = PgPool::connect(&url).await?;
    let (stop_sampling, mut sampling_stopped) = oneshot::channel::<()>();
    let sampler = {
        let pool = admin_pool.clone();
        let name = name.to_owned();
        tokio::spawn(async move {
            let (mut sum, mut samples, mut max) = (0i64, 0i64, 0i64);
            loop {
                tokio::select! {
                    _ = &mut sampling_stopped => break,
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
                let waiting: i64 = sqlx::query_scalar(
                    r#"SELECT COUNT(*) FROM pg_stat_activity
                       WHERE datname = $1 AND wait_event_type = 'Lock'"#,
                )
                .bind(&name)
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
                sum += waiting;
                samples += 1;
                max = max.max(waiting);
            }
            (
                if samples == 0 {
                    0.0
                } else {
                    sum as f64 / samples as f64
                },
                max,
            )
        })
    };

    let amount = Amount::new(PRICE)?;
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let start = Instant::now();
    let workers: Vec<_> = (0..args.concurrency)
        .map(|w| {
            let client = client.clone();
            let buyers = buyers.clone();
            let concurrency = args.concurrency;
            tokio::spawn(async move {
                let (mut applied, mut failed, mut latencies) = (0u64, 0u64, Vec::new());
                let mut i = 0usize;
                while Instant::now() < deadline {
                    let buyer = buyers[(w + i * concurrency) % buyers.len()];
                    let Ok(key) = OperationKey::parse(format!("bench:{shards}:{w}:{i}")) else {
                        break;
                    };
                    let req = DebitRequest {
                        operation_key: key,
                        account_id: buyer,
                        amount,
                    };
                    let t = Instant::now();
                    match client.debit(&req).await {
                        Ok(_) => applied += 1,
                        Err(CallError::Rejected { .. } | CallError::Unknown { .. }) => failed += 1,
                    }
                    latencies.push(t.elapsed().as_micros() as u64);
                    i += 1;
                }
                (applied, failed, latencies)
            })
        })
        .collect();
    let (mut applied, mut failed, mut latencies_us) = (0, 0, Vec::new());
    for w in workers {
        let (a, f, l) = w.await?;
        applied += a;
        failed += f;
        latencies_us.extend(l);
    }
    let elapsed = start.elapsed();
    let _ = stop_sampling.send(());
    let (lock_waiters_avg, lock_waiters_max) = sampler.await?;

    // The money is all still there: the merchant gained exactly the applied debits.
    let (total, merchant): (i64, i64) = sqlx::query_as(
        r#"SELECT (SELECT SUM(balance) FROM account_service.balances)::BIGINT,
                  (SELECT SUM(balance) FROM account_service.merchant_shards)::BIGINT"#,
    )
    .fetch_one(&admin_pool)
    .await?;
    let applied_rows: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM account_service.transactions WHERE kind = 'DEBIT' AND status = 'APPLIED'"#,
    )
    .fetch_one(&admin_pool)
    .await?;
    let invariant_ok = total == OPENING * args.buyers as i64
        && merchant == PRICE * applied_rows
        && applied_rows == applied as i64;
    admin_pool.close().await;
    let _ = stop.send(());
    server.await??;
    Ok(RunResult {
        shards,
        applied,
        failed,
        elapsed,
        latencies_us,
        lock_waiters_avg,
        lock_waiters_max,
        invariant_ok,
    })
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx] as f64 / 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let admin = paysaga_common::config::string(
        "BENCH_ADMIN_DATABASE_URL",
        "postgres://postgres:postgres@127.0.0.1:5432/postgres",
    );
    println!(
        "ledger-bench: {} s per run, {} concurrent clients, {} distinct buyers, pool {}, debits of {PRICE} over HTTP",
        args.seconds, args.concurrency, args.buyers, args.pool
    );
    let mut results = Vec::new();
    for &shards in &args.shards {
        let mut r = run_once(&admin, shards, &args).await?;
        r.latencies_us.sort_unstable();
        results.push(r);
    }
    println!();
    println!("| merchant rows | debits applied | failed | debits/s | p50 ms | p99 ms | max ms | sessions waiting on a lock (avg / max) | money invariant |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &results {
        println!(
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} / {} | {} |",
            r.shards,
            r.applied,
            r.failed,
            r.applied as f64 / r.elapsed.as_secs_f64(),
            percentile(&r.latencies_us, 0.50),
            percentile(&r.latencies_us, 0.99),
            percentile(&r.latencies_us, 1.0),
            r.lock_waiters_avg,
            r.lock_waiters_max,
            if r.invariant_ok { "held" } else { "BROKEN" },
        );
    }
    if results.iter().any(|r| !r.invariant_ok || r.failed > 0) {
        bail!("a run broke the money invariant or had failed debits");
    }
    Ok(())
}
