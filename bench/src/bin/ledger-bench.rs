//! `ledger-bench`: debits per second through the account service with the merchant
//! balance on one row and on sixteen; prints markdown. Needs the `account` binary of
//! the same profile (`cargo build --release -p account`).

use paysaga_bench::benches::{self, ledger::LedgerArgs};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: LedgerArgs = benches::start(
        "ledger-bench",
        "Whether the merchant side serialises payments.",
    );
    eprintln!(
        "ledger-bench: {} s per run, {} concurrent clients, {} distinct buyers, pool {}, debits over HTTP",
        args.seconds, args.concurrency, args.buyers, args.pool
    );
    let runs = benches::ledger::run(&args).await?;
    println!("{}", benches::ledger::markdown(&runs));
    benches::ledger::verdict(&runs)
}
