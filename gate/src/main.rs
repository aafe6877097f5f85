//! The gate binary: configuration, logging, listener, serve.

use gate::Config;
use paysaga_common::{server::shutdown_signal, telemetry::init_tracing};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::from_env()?;
    init_tracing(config.log_format);
    let listener = TcpListener::bind(&config.listen_addr).await?;
    gate::run(config, listener, shutdown_signal()).await
}
