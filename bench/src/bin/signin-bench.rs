//! `signin-bench`: sign-ins per second and their latency through the member service
//! with OWASP's Argon2id parameters, at each concurrency level; prints markdown. Runs
//! the account and member services in its own process (build it with `--release`).

use paysaga_bench::benches::{self, signin::SigninArgs};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: SigninArgs = benches::start(
        "signin-bench",
        "What a password check costs the member service.",
    );
    eprintln!(
        "signin-bench: {} members, {} s per run at {:?} clients, Argon2id m={} KiB t={}",
        args.members, args.seconds, args.concurrency, args.memory_kib, args.iterations
    );
    let report = benches::signin::run(&args).await?;
    println!("{}", report.markdown());
    report.verdict()
}
