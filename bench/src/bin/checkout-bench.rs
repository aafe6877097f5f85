//! `checkout-bench`: payments per second and their latency through the five real
//! services, buyers signed up through the member service; prints markdown. Needs the service binaries of the same profile.

use anyhow::bail;
use clap::Parser;
use paysaga_bench::benches::{self, checkout::CheckoutArgs};

/// Checkout saga throughput with ample stock and funds.
#[derive(Parser)]
#[command(name = "checkout-bench")]
struct Cli {
    #[command(flatten)]
    args: CheckoutArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    benches::init_tracing();
    let args = Cli::parse().args;
    eprintln!(
        "checkout-bench: {} payments, concurrency {}",
        args.buyers, args.concurrency
    );
    let report = benches::checkout::run(&args).await?;
    println!("{}", report.markdown());
    if !report.ok() {
        bail!("a payment did not complete or an invariant did not hold");
    }
    Ok(())
}
