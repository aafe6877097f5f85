//! The order service binary. Everything it does is [`order::serve_from_env`], which
//! `paysaga service order` runs too, so both start the service the same way.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    order::serve_from_env().await
}
