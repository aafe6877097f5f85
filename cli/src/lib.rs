//! The `paysaga` command as a library: the run command (`up`), the demo drop, and the
//! operator's subcommands. Process supervision, the buyer flow and the invariant checks
//! come from the end-to-end harness (`paysaga-e2e`), so the run command starts and
//! checks the system exactly as the tests do.

pub mod args;
pub mod compile;
pub mod demo;
pub mod infra;
pub mod ops;
pub mod table;
pub mod up;

use std::process::ExitCode;

use args::{Cli, Command};

/// Runs one command; the exit code says whether it succeeded.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Up(up) => up::run(up).await,
        Command::Payments(cmd) => ops::payments(&cli.endpoints, cmd).await,
        Command::Products => ops::products(&cli.endpoints).await,
        Command::Stock { product } => ops::stock(&cli.endpoints, product).await,
        Command::Quota { product } => ops::quota(&cli.endpoints, product).await,
        Command::Token(cmd) => ops::token(cmd),
        Command::Bootstrap(args) => ops::bootstrap(args).await,
        Command::Check(check) => ops::check(check).await,
    }
}
