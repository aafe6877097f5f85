//! The `paysaga` command as a library: the run command (`up`), each service in-process
//! (`service <name>`, what `up` starts), the demo drop, and the operator's subcommands
//! (payments, webhooks, members, stock).
//! Process supervision and PostgreSQL/Redis come from `paysaga-supervisor`, the demo's
//! set-up, buyers and invariant checks from `paysaga-drop`: the end-to-end tests use
//! the same two crates, so the run command starts and checks the system exactly as the
//! tests do.

pub mod args;
pub mod demo;
pub mod keygen;
pub mod members;
pub mod ops;
pub mod staff;
pub mod table;
pub mod up;
pub mod webhooks;

use std::process::ExitCode;

use args::{Cli, Command, ServiceName};

/// Runs one command; the exit code says whether it succeeded.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Up(up) => up::run(up).await,
        Command::Service { name } => {
            serve(name).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Payments(cmd) => ops::payments(&cli.endpoints, cmd).await,
        Command::Webhooks(cmd) => webhooks::run(&cli.endpoints, cmd).await,
        Command::Products(args) => match args.change {
            None => ops::products(&cli.endpoints).await,
            Some(change) => staff::products(&cli.endpoints, change).await,
        },
        Command::Member(cmd) => members::run(&cli.endpoints, cmd).await,
        Command::Stock { product } => ops::stock(&cli.endpoints, product).await,
        Command::Quota { product } => ops::quota(&cli.endpoints, product).await,
        Command::Staff(cmd) => staff::run(&cli.endpoints, cmd).await,
        Command::Audit(args) => staff::audit(&cli.endpoints, args).await,
        Command::Approvals(args) => staff::approvals(&cli.endpoints, args).await,
        Command::Token(cmd) => ops::token(cmd),
        Command::Keygen(args) => keygen::run(&args),
        Command::Bootstrap(args) => ops::bootstrap(args).await,
        Command::Check(check) => ops::check(check).await,
    }
}

/// One service in this process, exactly as its own binary runs it.
async fn serve(name: ServiceName) -> anyhow::Result<()> {
    match name {
        ServiceName::Account => account::serve_from_env().await,
        ServiceName::Member => member::serve_from_env().await,
        ServiceName::Order => order::serve_from_env().await,
        ServiceName::Gate => gate::serve_from_env().await,
        ServiceName::Orchestrator => orchestrator::serve_from_env().await,
    }
}
