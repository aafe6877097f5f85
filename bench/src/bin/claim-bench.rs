//! `claim-bench`: compares claim strategies on a database of its own and prints markdown.

use paysaga_bench::benches::{self, claims::BenchConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cfg: BenchConfig = benches::start(
        "claim-bench",
        "The order service's claim against counter-row alternatives, on one database.",
    );
    eprintln!(
        "claim-bench: {} claimers over {} PostgreSQL connections; large stock {}",
        cfg.concurrency, cfg.connections, cfg.large_stock
    );
    let rows = benches::claims::run(&cfg, |r| eprintln!("{}", r.summary.line())).await?;
    println!("{}", benches::claims::markdown(&rows));
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
