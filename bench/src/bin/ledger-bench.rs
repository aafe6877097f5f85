//! `ledger-bench`: debits per second through the account service with the merchant
//! balance on one row and on sixteen; prints markdown. Needs the `account` binary of
//! the same profile (`cargo build --release -p account`).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    paysaga_bench::benches::ledger::main().await
}
