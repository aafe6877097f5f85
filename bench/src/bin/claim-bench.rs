//! `claim-bench`: compares claim strategies on a database of its own and prints markdown.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    paysaga_bench::benches::claims::main().await
}
