//! The order service process.

use order::{run, Config};
use paysaga_common::{server::shutdown_signal, telemetry::init_tracing};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::from_env()?;
    init_tracing(config.log_format);
    let listener = tokio::net::TcpListener::bind(&config.listen_addr).await?;
    run(config, listener, shutdown_signal()).await
}
