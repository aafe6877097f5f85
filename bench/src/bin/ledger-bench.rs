//! `ledger-bench`: debits per second through the account service with the merchant
//! balance on one row and on sixteen; prints markdown. Needs the `account` binary of
//! the same profile (`cargo build --release -p account`).

use clap::Parser;
use paysaga_bench::benches::{self, ledger::LedgerArgs};

/// Whether the merchant side serialises payments.
#[derive(Parser)]
#[command(name = "ledger-bench")]
struct Cli {
    #[command(flatten)]
    args: LedgerArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    benches::init_tracing();
    let args = Cli::parse().args;
    eprintln!(
        "ledger-bench: {} s per run, {} concurrent clients, {} distinct buyers, pool {}, debits over HTTP",
        args.seconds, args.concurrency, args.buyers, args.pool
    );
    let runs = benches::ledger::run(&args).await?;
    println!("{}", benches::ledger::markdown(&runs));
    benches::ledger::verdict(&runs)
}
