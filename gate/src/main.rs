//! The gate service binary. Everything it does is [`gate::serve_from_env`], which
//! `paysaga service gate` runs too, so both start the service the same way.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    gate::serve_from_env().await
}
