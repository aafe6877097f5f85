//! The account service binary: configuration, logging, listening, nothing else.

use anyhow::Context;
use paysaga_common::{server::shutdown_signal, telemetry::init_tracing};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = account::Config::from_env()?;
    init_tracing(config.log_format);
    let listener = TcpListener::bind(&config.listen_addr)
        .await
        .with_context(|| format!("binding {}", config.listen_addr))?;
    account::run(config, listener, shutdown_signal()).await
}
