//! The services' own benchmarks, each also a binary of this crate (`gate-bench`,
//! `claim-bench`, `ledger-bench`, `checkout-bench`, `signin-bench`) and partly folded into
//! the main run.

pub mod checkout;
pub mod claims;
pub mod gate;
pub mod ledger;
pub mod signin;

/// Logs to stderr at `warn` unless `RUST_LOG` says otherwise, for the bench binaries.
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,sqlx=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}
