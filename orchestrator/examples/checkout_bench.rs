//! Payment throughput and latency through the real account, order and orchestrator
//! services (in one process, real PostgreSQL, a fresh database), then the money
//! invariant checked from the tables.
//!
//! `cargo run --release -p orchestrator --example checkout_bench` with `BUYERS`
//! (default 1000) and `CONCURRENCY` (default 64).

#[path = "../tests/harness/mod.rs"]
mod harness;

use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::{pay_request, Stack};
use hdrhistogram::Histogram;
use orchestrator::Hooks;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn commits(s: &Stack) -> i64 {
    sqlx::query_scalar(
        r#"SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"#,
    )
    .fetch_one(&s.admin)
    .await
    .expect("pg_stat_database")
}

#[tokio::main]
async fn main() {
    let buyers = env("BUYERS", 1000);
    let concurrency = env("CONCURRENCY", 64);
    let mut s = Stack::start().await;
    let product = s.product(buyers as i64).await;
    let mut accounts = Vec::with_capacity(buyers);
    for b in 0..buyers {
        accounts.push(s.open_account(&format!("bench-{b}"), 1_000_000).await);
    }
    let reservations: Vec<_> = futures::stream::iter(0..buyers)
        .map(|b| {
            let s = &s;
            async move { s.reserve(product, &format!("bench-{b}")).await }
        })
        .buffered(32)
        .collect()
        .await;

    let mut config = s.config();
    config.downstream_timeout = Duration::from_millis(2000);
    config.lease = Duration::from_millis(15_000);
    config.db_max_connections = 32;
    let o = s.orchestrator(config, Hooks::default()).await;
    let clients: Vec<_> = (0..buyers)
        .map(|b| o.buyer(&format!("bench-{b}")))
        .collect();

    let commits_before = commits(&s).await;
    let start = Instant::now();
    let results: Vec<(u16, String, Duration)> = futures::stream::iter(0..buyers)
        .map(|b| {
            let (client, req) = (&clients[b], pay_request(reservations[b], accounts[b]));
            async move {
                let t = Instant::now();
                let answer = client.pay(&format!("bench-key-{b}"), &req).await;
                let latency = t.elapsed();
                match answer {
                    Ok(a) => (a.status, a.payment.state, latency),
                    Err(e) => (e.status().unwrap_or(0), e.to_string(), latency),
                }
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let elapsed = start.elapsed();
    let commits_after = commits(&s).await;

    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let mut by_answer = std::collections::BTreeMap::<String, usize>::new();
    for (status, state, latency) in &results {
        hist.record(latency.as_micros() as u64).expect("record");
        *by_answer.entry(format!("{status} {state}")).or_default() += 1;
    }
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    println!("checkout_bench: {buyers} payments, concurrency {concurrency}");
    println!("  answers: {by_answer:?}");
    println!(
        "  throughput: {:.0} payments/s ({:.2} s)",
        buyers as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    println!(
        "  POST /v1/payments latency ms: p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}",
        ms(0.5),
        ms(0.9),
        ms(0.99),
        hist.max() as f64 / 1000.0
    );
    println!(
        "  PostgreSQL commits per payment, all three services: {:.1}",
        (commits_after - commits_before) as f64 / buyers as f64
    );

    let mut done = 0;
    for r in &reservations {
        let id = s.payment_id_for(*r).await;
        if s.settled(id).await == "COMPLETED" {
            done += 1;
        }
    }
    s.check_money().await;
    println!("  settled: {done}/{buyers} COMPLETED; money invariant holds (per payment net in {{0, amount}}, total balance unchanged)");
}
