//! `gate-bench`: pass issuance and sold-out answers against the authentication ceiling,
//! a drop of 100 units against 10,000 buyers, and the pieces of a pass; prints markdown.

use clap::Parser;
use paysaga_bench::benches::{self, gate::BenchConfig};

/// The gate's benchmark, in process against the shared Redis.
#[derive(Parser)]
#[command(name = "gate-bench")]
struct Cli {
    #[command(flatten)]
    cfg: BenchConfig,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    benches::init_tracing();
    let cfg = Cli::parse().cfg;
    eprintln!("gate-bench: {cfg:?}");
    let report = benches::gate::run(&cfg).await?;
    println!("{}", report.markdown());
    Ok(())
}
