//! `signin-bench`: sign-ins per second and their latency through the member service
//! with OWASP's Argon2id parameters, at each concurrency level; prints markdown. Runs
//! the account and member services in its own process (build it with `--release`).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    paysaga_bench::benches::signin::main().await
}
