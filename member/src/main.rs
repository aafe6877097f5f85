//! The member service binary. Everything it does is [`member::serve_from_env`].

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    member::serve_from_env().await
}
