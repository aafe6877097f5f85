//! The account service binary. Everything it does is [`account::serve_from_env`], which
//! `paysaga service account` runs too, so both start the service the same way.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    account::serve_from_env().await
}
