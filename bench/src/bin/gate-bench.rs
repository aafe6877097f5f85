//! `gate-bench`: pass issuance and sold-out answers against the authentication ceiling,
//! a drop of 100 units against 10,000 buyers, and the pieces of a pass; prints markdown.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    paysaga_bench::benches::gate::main().await
}
