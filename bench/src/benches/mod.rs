//! The services' own benchmarks, each also a binary of this crate (`gate-bench`,
//! `claim-bench`, `ledger-bench`, `checkout-bench`, `signin-bench`) and partly folded into
//! the main run.

pub mod checkout;
pub mod claims;
pub mod gate;
pub mod ledger;
pub mod signin;

/// Logs to stderr at `warn` unless `RUST_LOG` says otherwise, for every binary of this crate.
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,sqlx=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Starts a bench binary: tracing on, then its flags parsed as `A` under `name`, with
/// `about` as the help text.
pub fn start<A: clap::Args + clap::FromArgMatches>(name: &'static str, about: &'static str) -> A {
    init_tracing();
    let matches = A::augment_args(clap::Command::new(name))
        .about(about)
        .get_matches();
    A::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}
