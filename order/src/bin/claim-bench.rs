//! `cargo run --release -p order --bin claim-bench`: compares claim strategies on a
//! database of its own and prints a Markdown table.
//!
//! Settings: `BENCH_ADMIN_DATABASE_URL` (default the local superuser),
//! `CLAIM_BENCH_CONNECTIONS` (default 40), `CLAIM_BENCH_CONCURRENCY` (default 100),
//! `CLAIM_BENCH_LARGE_STOCK` (default 1000000), `CLAIM_BENCH_SMALL_STOCK` (default 100),
//! `CLAIM_BENCH_CYCLE_CONCURRENCY` (default 50), `CLAIM_BENCH_ONLY_CYCLES` (default false).

use order::claim_bench::{self, BenchConfig};
use paysaga_common::config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let defaults = BenchConfig::default();
    let cfg = BenchConfig {
        admin_url: config::string("BENCH_ADMIN_DATABASE_URL", &defaults.admin_url),
        connections: config::parse("CLAIM_BENCH_CONNECTIONS", defaults.connections)?,
        concurrency: config::parse("CLAIM_BENCH_CONCURRENCY", defaults.concurrency)?,
        large_stock: config::parse("CLAIM_BENCH_LARGE_STOCK", defaults.large_stock)?,
        small_stock: config::parse("CLAIM_BENCH_SMALL_STOCK", defaults.small_stock)?,
        cycle_concurrency: config::parse(
            "CLAIM_BENCH_CYCLE_CONCURRENCY",
            defaults.cycle_concurrency,
        )?,
        only_cycles: config::parse("CLAIM_BENCH_ONLY_CYCLES", false)?,
        ..defaults
    };
    eprintln!(
        "claim-bench: {} claimers over {} PostgreSQL connections; large stock {}",
        cfg.concurrency, cfg.connections, cfg.large_stock
    );
    let rows = claim_bench::run(&cfg, |r| {
        eprintln!(
            "  done: {} / {} in {:.2}s",
            r.scenario,
            r.strategy.name(),
            r.elapsed.as_secs_f64()
        )
    })
    .await?;
    println!("{}", claim_bench::markdown(&rows));
    let small = rows
        .iter()
        .find(|r| r.stock == cfg.small_stock && r.scenario.starts_with("claim+release"));
    let large = rows
        .iter()
        .find(|r| r.stock == cfg.large_stock && r.scenario.starts_with("claim+release"));
    if let (Some(s), Some(l)) = (small, large) {
        println!(
            "SKIP LOCKED claim p95: {:.2} ms at {} units vs {:.2} ms at {} units",
            s.p95_ms, s.stock, l.p95_ms, l.stock
        );
    }
    Ok(())
}
