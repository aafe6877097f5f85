//! `gate-bench`: pass issuance and sold-out answers against the authentication ceiling,
//! a drop of 100 units against 10,000 buyers, and the pieces of a pass; prints markdown.

use paysaga_bench::benches::{self, gate::BenchConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cfg: BenchConfig = benches::start(
        "gate-bench",
        "The gate's benchmark, in process against the shared Redis.",
    );
    eprintln!("gate-bench: {cfg:?}");
    let report = benches::gate::run(&cfg).await?;
    println!("{}", report.markdown());
    Ok(())
}
