//! The `paysaga-bench` command: parse arguments, run, print the table, write the results.

use std::process::ExitCode;

use clap::Parser;
use paysaga_bench::cli::{Cli, Command, Settings};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    paysaga_bench::benches::init_tracing();
    // Before any client is made (see `run_tls`).
    if paysaga_bench::system::run_tls().is_some() {
        eprintln!("BENCH_TLS=1: every service serves TLS, and they call each other over https");
    }
    if let Some(Command::CeilingServer) = cli.command {
        return match paysaga_bench::ceiling::server::serve().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ceiling server: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let settings = match Settings::from_args(&cli.run) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("paysaga-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let report = tokio::select! {
        r = paysaga_bench::run(settings) => r,
        _ = tokio::signal::ctrl_c() => {
            // Dropping the run future drops the benchmark database and child processes.
            eprintln!("paysaga-bench: interrupted; cleaned up");
            return ExitCode::from(130);
        }
    };
    match report {
        Ok(report) => {
            println!("{}", report.markdown());
            match report.write() {
                Ok(path) => eprintln!("results: {}", path.display()),
                Err(e) => eprintln!("paysaga-bench: could not write results: {e}"),
            }
            if report.all_invariants_hold() {
                ExitCode::SUCCESS
            } else {
                eprintln!("paysaga-bench: an invariant did not hold (see the table)");
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("paysaga-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
