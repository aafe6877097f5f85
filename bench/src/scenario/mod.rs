//! The benchmark's scenarios, each measured against the real services.

pub mod bots;
pub mod checkout;
pub mod claims;
pub mod drop;
pub mod gate;
pub mod gate_bench;
pub mod limit;
pub mod measure;
pub mod saga;
pub mod seeds;
pub mod sell_through;

/// A set-up step's failure, named.
pub(crate) fn setup(what: &str, e: impl std::fmt::Display) -> crate::error::Error {
    crate::error::Error::Setup(format!("{what}: {e}"))
}

/// The real services started with `options`, where buyers reach them, and an operator
/// whose calls may take as long as seeding thousands of buyers does.
pub(crate) async fn started(
    options: paysaga_e2e::StackOptions,
) -> crate::error::Result<(
    paysaga_e2e::Stack,
    paysaga_drop::Endpoints,
    paysaga_drop::Admin,
)> {
    let stack = paysaga_e2e::Stack::start(options)
        .await
        .map_err(|e| setup("starting the services", format!("{e:#}")))?;
    let endpoints = paysaga_drop::Endpoints::from_wiring(stack.wiring());
    let admin = paysaga_drop::Admin::new(
        endpoints.clone(),
        paysaga_common::client::http_client(std::time::Duration::from_secs(180)),
    );
    Ok((stack, endpoints, admin))
}
