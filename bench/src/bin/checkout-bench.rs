//! `checkout-bench`: payments per second and their latency through the five real
//! services, buyers signed up through the member service; prints markdown. Needs the service binaries of the same profile.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    paysaga_bench::benches::checkout::main().await
}
