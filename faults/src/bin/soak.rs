//! The soak: every scenario (or the named ones) at the soak size, `--rounds` times each,
//! each round on a fresh system, then a summary table. Exits non-zero on any violation.
//!
//! `cargo build --release --workspace --bins && cargo run --release -p paysaga-faults --bin soak -- --rounds 2`

use std::time::Instant;

use anyhow::bail;
use clap::Parser;
use paysaga_faults::{failover_table, table, Plan, Scenario};

#[derive(Parser, Debug)]
#[command(about = "Fault-injection soak over the real paysaga services")]
struct Args {
    /// Runs of each scenario, each on a fresh system.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Only these scenarios (repeatable): orchestrator-crash, slow-account, order-partition,
    /// account-crash, redis-loss, database-drops, impatient-clients, order-crash,
    /// redis-cluster-master-loss, postgres-failover, postgres-partition.
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Buyers per drop.
    #[arg(long)]
    buyers: Option<usize>,
    /// Units per drop.
    #[arg(long)]
    units: Option<i64>,
    /// Faults injected per drop.
    #[arg(long)]
    repeats: Option<u32>,
    /// PostgreSQL failovers per drop (postgres-failover, postgres-partition).
    #[arg(long)]
    failovers: Option<u32>,
    /// Seed of the first round (each round adds one); random if unset.
    #[arg(long)]
    seed: Option<u64>,
    /// Also write every report as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Print what each scenario injects and proves (Markdown) and exit.
    #[arg(long)]
    describe: bool,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.describe {
        print!("{}", paysaga_faults::report::scenario_table());
        return Ok(());
    }
    let mut scenarios = Vec::new();
    for name in &args.scenarios {
        match Scenario::parse(name) {
            Some(s) => scenarios.push(s),
            None => bail!("unknown scenario {name}"),
        }
    }
    if scenarios.is_empty() {
        scenarios = Scenario::ALL.to_vec();
    }
    let mut plan = Plan::soak();
    if let Some(b) = args.buyers {
        plan.buyers = b;
    }
    if let Some(u) = args.units {
        plan.units = u;
    }
    if let Some(r) = args.repeats {
        plan.repeats = r;
    }
    if let Some(f) = args.failovers {
        plan.failovers = f;
    }
    let first_seed = args.seed.unwrap_or(plan.seed);

    let started = Instant::now();
    let mut reports = Vec::new();
    for scenario in scenarios {
        for round in 0..args.rounds {
            let plan = scenario.adapt(&Plan {
                seed: first_seed.wrapping_add(u64::from(round)),
                ..plan.clone()
            });
            eprintln!(
                "== {scenario} round {}/{} (seed {}, {} buyers, {} units)",
                round + 1,
                args.rounds,
                plan.seed,
                plan.buyers,
                plan.units
            );
            let report = paysaga_faults::run(scenario, &plan).await?;
            eprint!("{}", report.summary());
            reports.push(report);
        }
    }
    println!(
        "\nsoak: {} run(s) in {:.0}s\n",
        reports.len(),
        started.elapsed().as_secs_f64()
    );
    println!("{}", table(&reports));
    let failovers = failover_table(&reports);
    if !failovers.is_empty() {
        println!("PostgreSQL failovers:\n\n{failovers}");
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&reports)?)?;
    }
    let dirty: Vec<_> = reports
        .iter()
        .filter(|r| !r.violations.is_empty())
        .collect();
    for r in &dirty {
        eprintln!(
            "{} (seed {}): {:#?}\nlogs:\n{}",
            r.scenario, r.seed, r.violations, r.logs
        );
    }
    if !dirty.is_empty() {
        bail!("{} run(s) with violations", dirty.len());
    }
    Ok(())
}
