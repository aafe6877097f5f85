//! The orchestrator process: configuration, logs, socket, run.

use orchestrator::{run, Config};
use paysaga_common::{server::shutdown_signal, telemetry::init_tracing};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::from_env()?;
    init_tracing(config.log_format);
    let listener = TcpListener::bind(&config.listen_addr).await?;
    run(config, listener, shutdown_signal()).await
}
