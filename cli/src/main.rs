//! The `paysaga` command: runs the whole system, plays a demo drop, and gives an operator
//! the terminal tools of a running system.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = paysaga::args::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("paysaga: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(paysaga::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("paysaga: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
