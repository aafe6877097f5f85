//! paysaga-bench: measures paysaga's flash-sale path against its alternatives and against
//! this machine's limits, in one run, and writes the results as JSON and markdown.

pub mod benchdb;
pub mod benches;
pub mod ceiling;
pub mod cli;
pub mod client;
pub mod cpu;
pub mod error;
pub mod flow;
pub mod intake_queue;
pub mod invariants;
pub mod load;
pub mod machine;
pub mod measured;
pub mod memory;
pub mod report;
pub mod scenario;
pub mod stats;
pub mod system;
pub mod targets;
pub mod wire;

use std::time::Duration;

use crate::{
    benchdb::BenchDb,
    ceiling::Ceilings,
    cli::{Scenario, Settings},
    client::Buyers,
    error::Result,
    load::Load,
    machine::Machine,
    measured::Measured,
    report::Report,
    stats::RunSummary,
    system::System,
};

/// Everything a scenario needs from the run: settings, the database, Redis, buyers.
pub struct Bench {
    pub settings: Settings,
    pub run_id: String,
    pub db: BenchDb,
    pub redis_prefix: String,
    /// The buyers of the started system, signed up through its member service once it
    /// has started ([`scenario::measure::seed_buyers`]); none before.
    pub buyers: Buyers,
    /// As many buyers with DEVELOPMENT-key tokens, for the HTTP ceiling server only
    /// (it verifies with the development key; a started system refuses them).
    pub ceiling_buyers: Buyers,
    pub report: Report,
    pub ceilings: Ceilings,
    pub measured: Measured,
}

impl Bench {
    /// A load phase with the run's concurrency.
    pub fn load(&self, name: &str, max_ops: u64, max_time: Duration) -> Load {
        Load {
            show_progress: self.settings.progress,
            ..Load::new(name, self.settings.concurrency, max_ops, max_time)
        }
    }

    /// A throughput phase: as many operations as fit in the phase time.
    pub fn phase(&self, name: &str) -> Load {
        self.load(name, u64::MAX, self.settings.phase)
    }

    /// Records a phase in the report and returns it.
    pub fn keep(&mut self, summary: RunSummary) -> RunSummary {
        eprintln!("{}", summary.line());
        let errors = summary.errors();
        if errors > 0 {
            let kinds: Vec<String> = summary
                .outcomes
                .iter()
                .filter(|(k, _)| k.starts_with("error"))
                .map(|(k, o)| format!("{k} ×{}", o.count))
                .collect();
            self.report.note(format!(
                "{}: {errors} unexpected answers ({})",
                summary.name,
                kinds.join(", ")
            ));
        }
        self.report.runs.push(summary.clone());
        summary
    }
}

/// A short unreported phase that opens the connections a measured phase will reuse.
pub fn warmup(load: &Load) -> Load {
    Load {
        name: format!("{} (warm-up)", load.name),
        max_ops: (load.concurrency as u64) * 8,
        show_progress: false,
        ..load.clone()
    }
}

/// Runs the selected scenarios and returns the report (written to disk by the caller).
pub async fn run(mut settings: Settings) -> Result<Report> {
    // The benchmark's own links (the commit loop, the SQL limit) are carried as the
    // services' are.
    settings.admin_database_url = system::run_database_url(&settings.admin_database_url)?;
    let mut machine = Machine::detect();
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    eprintln!(
        "paysaga-bench {run_id}: {} cores, {} MiB; settings {:?}",
        machine.cores, machine.memory_mib, settings
    );
    let db = BenchDb::create(&settings.admin_database_url).await?;
    let admin = db.admin_pool(2).await?;
    machine.postgres =
        sqlx::query_scalar::<_, String>(r#"SELECT split_part(version(), ' on ', 1)"#)
            .fetch_one(&admin)
            .await?;
    let redis_client = redis::Client::open(settings.redis_url.as_str())?;
    let mut redis_conn = redis_client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut redis_conn)
        .await?;
    machine.redis = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_owned();
    admin.close().await;

    let ceiling_buyers = Buyers::development(&run_id, buyer_count(&settings));
    let report = Report::new(settings.clone(), machine);
    let mut bench = Bench {
        settings,
        redis_prefix: format!("bench{run_id}:"),
        run_id,
        db,
        buyers: Buyers::new(Vec::new(), Vec::new()),
        ceiling_buyers,
        report,
        ceilings: Ceilings::default(),
        measured: Measured::default(),
    };

    let outcome = run_scenarios(&mut bench).await;

    let _ = memory::redis_delete_prefix(&mut redis_conn, &bench.redis_prefix).await;
    let Bench { db, mut report, .. } = bench;
    db.drop_now().await?;
    outcome?;
    report.machine.load_avg_end = machine::load_avg();
    report.finished_at = Some(chrono::Utc::now());
    Ok(report)
}

/// Buyers a run uses: the drop's, at least one per client, and, for the checkout part,
/// one funded buyer per checkout of a level.
pub fn buyer_count(settings: &Settings) -> usize {
    let checkout_buyers = if settings.runs(Scenario::Checkout) {
        settings.checkout_buyers
    } else {
        0
    };
    settings
        .buyers
        .max(settings.concurrency as u64)
        .max(checkout_buyers) as usize
}

/// Whether this run measures `part`; if so, says on the console that it starts.
fn starts(bench: &Bench, part: Scenario) -> bool {
    let runs = bench.settings.runs(part);
    if runs {
        eprintln!("{}", part.title());
    }
    runs
}

async fn run_scenarios(bench: &mut Bench) -> Result<()> {
    if starts(bench, Scenario::Ceilings) {
        bench.ceilings = ceiling::measure::measure(bench).await?;
    }
    let needs_system = [
        Scenario::DropGate,
        Scenario::DropDirect,
        Scenario::Saga,
        Scenario::Checkout,
    ]
    .iter()
    .any(|s| bench.settings.runs(*s));
    if needs_system {
        eprintln!("starting the five services (release binaries beside this one)");
        let sys = System::start("bench", client::http_client(bench.settings.concurrency)?).await?;
        let links = sys.database_links().await?;
        eprintln!("the services' PostgreSQL links once started: {links}");
        bench.report.machine.database_links = links;
        let accounts = scenario::measure::seed_buyers(bench, &sys).await?;
        if starts(bench, Scenario::DropGate) {
            scenario::measure::drops_with_gate(bench, &sys, &accounts).await?;
            scenario::measure::gate_throughput(bench, &sys).await?;
            eprintln!("scenario 1c: the gate's own bench (in-process)");
            scenario::gate_bench::measure(bench).await?;
        }
        if starts(bench, Scenario::DropDirect) {
            scenario::measure::drop_direct(bench, &sys, &accounts).await?;
        }
        if starts(bench, Scenario::Saga) {
            scenario::measure::saga_throughput(bench, &sys, &accounts).await?;
        }
        if starts(bench, Scenario::Checkout) {
            scenario::checkout::measure(bench, &sys, &accounts).await?;
        }
    }
    // The parts that start what they measure themselves; the limit after part 6, so its
    // levels are reported against it.
    for part in [
        Scenario::Limit,
        Scenario::SellThrough,
        Scenario::Bots,
        Scenario::Seeds,
        Scenario::Claims,
    ] {
        if !starts(bench, part) {
            continue;
        }
        match part {
            Scenario::Limit => scenario::limit::measure(bench).await?,
            Scenario::SellThrough => scenario::sell_through::measure(bench).await?,
            Scenario::Bots => scenario::bots::measure(bench).await?,
            Scenario::Seeds => scenario::seeds::measure(bench).await?,
            Scenario::Claims => scenario::claims::measure(bench).await?,
            other => unreachable!("{other:?} is not in this list"),
        }
    }
    targets::evaluate(&mut bench.report, &bench.ceilings, &bench.measured);
    Ok(())
}
