//! The orchestrator service binary. Everything it does is [`orchestrator::serve_from_env`], which
//! `paysaga service orchestrator` runs too, so both start the service the same way.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    orchestrator::serve_from_env().await
}
