//! Debits per second through the real account service (a process started by the
//! end-to-end harness on a fresh database) with many concurrent, distinct buyers: once
//! with the merchant balance on one row, once spread over sixteen, to show whether the
//! merchant side serialises payments. The money is then checked in PostgreSQL.

use std::{fmt::Write as _, sync::Arc, time::Duration};

use anyhow::{bail, Context};
use clap::{builder::TypedValueParser as _, Args};
use futures::{stream, StreamExt, TryStreamExt};
use paysaga_common::{
    auth::{MemberId, ServiceRole},
    client::CallError,
    credentials::TokenSource,
    money::Amount,
};
use paysaga_contracts::account::{
    api::{DebitRequest, OpenAccountRequest, OperationKey},
    client::AccountClient,
};
use paysaga_e2e::{Stack, StackOptions};
use paysaga_supervisor::ServiceKind;
use tokio::sync::oneshot;

use crate::{
    load::{self, Load, Outcome},
    stats::{self, RunSummary},
};

const PRICE: i64 = 1_299;
const OPENING: i64 = 1_000_000_000;

/// `ledger-bench`'s settings.
#[derive(Debug, Clone, Args)]
pub struct LedgerArgs {
    /// Seconds each run debits for.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub seconds: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096).map(usize::from))]
    pub concurrency: usize,
    /// Distinct buyers, each with an account of its own.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..).map(|n| n as usize))]
    pub buyers: usize,
    /// Merchant balance rows, one run each (the service accepts 1 to 16).
    #[arg(long, value_delimiter = ',', default_values_t = [1u16, 16], value_parser = clap::value_parser!(u16).range(1..))]
    pub shards: Vec<u16>,
    /// The account service's PostgreSQL pool.
    #[arg(long, default_value_t = 32)]
    pub pool: u32,
}

/// One run at one merchant shard count.
pub struct LedgerRun {
    pub shards: u16,
    /// Outcomes `applied` and errors (`error:rejected`, `error:unknown`).
    pub summary: RunSummary,
    pub lock_waiters_avg: f64,
    pub lock_waiters_max: i64,
    pub invariant_ok: bool,
}

/// Samples, every 50 ms until stopped, how many sessions on `db` wait on a lock.
fn sample_lock_waiters(
    pool: sqlx::PgPool,
    db: String,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<(f64, i64)>) {
    let (stop, mut stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let (mut sum, mut samples, mut max) = (0i64, 0i64, 0i64);
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            let waiting: i64 = sqlx::query_scalar(
                r#"SELECT COUNT(*) FROM pg_stat_activity
                   WHERE datname = $1 AND wait_event_type = 'Lock'"#,
            )
            .bind(&db)
            .fetch_one(&pool)
            .await
            .unwrap_or(0);
            sum += waiting;
            samples += 1;
            max = max.max(waiting);
        }
        (sum as f64 / samples.max(1) as f64, max)
    });
    (stop, task)
}

/// Starts an account service with `shards` merchant rows, opens the buyers, debits for
/// `args.seconds`, and checks that the merchant gained exactly the applied debits.
pub async fn run_once(shards: u16, args: &LedgerArgs) -> anyhow::Result<LedgerRun> {
    let options = StackOptions::new("ledger-bench")
        .only(&[ServiceKind::Account])
        .rust_log("warn")
        .env(ServiceKind::Account, "MERCHANT_SHARDS", shards)
        .env(ServiceKind::Account, "DB_MAX_CONNECTIONS", args.pool);
    let stack = Stack::start(options)
        .await
        .context("starting the account service")?;
    // Accounts are opened as the operator opens them, debits made as the saga makes them:
    // each role may call only its own routes.
    let client_as = |role: ServiceRole| {
        AccountClient::new(
            stack.url(ServiceKind::Account),
            TokenSource::development(role),
            Duration::from_secs(30),
        )
    };
    let opener = client_as(ServiceRole::Operator);
    let client = client_as(ServiceRole::Orchestrator);
    let buyers: Vec<i64> = stream::iter(0..args.buyers)
        .map(|i| {
            let client = opener.clone();
            async move {
                let req = OpenAccountRequest {
                    member_id: MemberId::parse(format!("bench-{i}")).map_err(anyhow::Error::msg)?,
                    opening_balance: OPENING,
                    open_key: None,
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

    let admin = stack.admin_pool().await;
    let (stop_sampling, sampler) = sample_lock_waiters(admin.clone(), stack.db.name.clone());
    let amount = Amount::new(PRICE)?;
    let load = Load::new(
        format!("ledger: {shards} merchant rows"),
        args.concurrency,
        u64::MAX,
        Duration::from_secs(args.seconds),
    );
    let summary = load::run(&load, move |ctx| {
        let (client, buyers) = (client.clone(), buyers.clone());
        async move {
            let buyer = buyers[ctx.seq as usize % buyers.len()];
            let Ok(key) = OperationKey::parse(format!("bench:{shards}:{}", ctx.seq)) else {
                return Outcome::error("operation_key");
            };
            let req = DebitRequest {
                operation_key: key,
                account_id: buyer,
                amount,
                hold_key: None,
            };
            match client.debit(&req).await {
                Ok(_) => Outcome::of("applied"),
                Err(CallError::Rejected { .. }) => Outcome::error("rejected"),
                Err(CallError::Unknown { .. }) => Outcome::error("unknown"),
            }
        }
    })
    .await;
    let _ = stop_sampling.send(());
    let (lock_waiters_avg, lock_waiters_max) = sampler.await?;

    // The money is all still there: the merchant gained exactly the applied debits.
    let (total, merchant): (i64, i64) = sqlx::query_as(
        r#"SELECT (SELECT SUM(balance) FROM account_service.balances)::BIGINT,
                  (SELECT SUM(balance) FROM account_service.merchant_shards)::BIGINT"#,
    )
    .fetch_one(&admin)
    .await?;
    let applied_rows: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM account_service.transactions
           WHERE kind = 'DEBIT' AND status = 'APPLIED'"#,
    )
    .fetch_one(&admin)
    .await?;
    let invariant_ok = total == OPENING * args.buyers as i64
        && merchant == PRICE * applied_rows
        && applied_rows == summary.count("applied") as i64;
    admin.close().await;
    drop(stack);
    Ok(LedgerRun {
        shards,
        summary,
        lock_waiters_avg,
        lock_waiters_max,
        invariant_ok,
    })
}

/// One run per shard count; fails after printing if a run broke the money invariant
/// or had failed debits.
pub async fn run(args: &LedgerArgs) -> anyhow::Result<Vec<LedgerRun>> {
    let mut results = Vec::new();
    for &shards in &args.shards {
        let r = run_once(shards, args).await?;
        eprintln!("{}", r.summary.line());
        results.push(r);
    }
    Ok(results)
}

/// The runs as the shared load table, then the lock waiters and the money check.
pub fn markdown(runs: &[LedgerRun]) -> String {
    let summaries: Vec<RunSummary> = runs.iter().map(|r| r.summary.clone()).collect();
    let mut out = stats::markdown_table(&summaries);
    out.push_str("\n| merchant rows | debits applied | failed | sessions waiting on a lock (avg / max) | money invariant |\n|---:|---:|---:|---|---|\n");
    for r in runs {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} / {} | {} |",
            r.shards,
            r.summary.count("applied"),
            r.summary.errors(),
            r.lock_waiters_avg,
            r.lock_waiters_max,
            if r.invariant_ok { "held" } else { "BROKEN" },
        );
    }
    out
}

/// An error when any run broke the money invariant or had failed debits.
pub fn verdict(runs: &[LedgerRun]) -> anyhow::Result<()> {
    if runs
        .iter()
        .any(|r| !r.invariant_ok || r.summary.errors() > 0)
    {
        bail!("a run broke the money invariant or had failed debits");
    }
    Ok(())
}

/// The `ledger-bench` binary: its flags, the run, the markdown on stdout.
pub async fn main() -> anyhow::Result<()> {
    let args: LedgerArgs = super::start(
        "ledger-bench",
        "Whether the merchant side serialises payments.",
    );
    eprintln!(
        "ledger-bench: {} s per run, {} concurrent clients, {} distinct buyers, pool {}, debits over HTTP",
        args.seconds, args.concurrency, args.buyers, args.pool
    );
    let runs = run(&args).await?;
    println!("{}", markdown(&runs));
    verdict(&runs)
}
