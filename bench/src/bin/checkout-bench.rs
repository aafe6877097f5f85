//! `checkout-bench`: payments per second and their latency through the five real
//! services, buyers signed up through the member service; prints markdown. Needs the service binaries of the same profile.

use anyhow::bail;
use paysaga_bench::benches::{self, checkout::CheckoutArgs};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: CheckoutArgs = benches::start(
        "checkout-bench",
        "Checkout saga throughput with ample stock and funds.",
    );
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
