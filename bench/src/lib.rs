//! paysaga-bench: measures paysaga's flash-sale path against its alternatives and against
//! this machine's limits, in one run, and writes the results as JSON and markdown.

pub mod benchdb;
pub mod ceiling;
pub mod cli;
pub mod client;
pub mod error;
pub mod load;
pub mod machine;
pub mod memory;
pub mod report;
pub mod stats;
pub mod targets;

use std::time::Duration;

use crate::{
    benchdb::BenchDb,
    ceiling::{server::CeilingProcess, Ceilings},
    cli::{Scenario, Settings},
    client::Buyers,
    error::Result,
    load::Load,
    machine::Machine,
    report::Report,
    stats::RunSummary,
};

/// Everything a scenario needs from the run: settings, the database, Redis, buyers.
pub struct Bench {
    pub settings: Settings,
    pub run_id: String,
    pub db: BenchDb,
    pub redis_prefix: String,
    pub buyers: Buyers,
    pub report: Report,
    pub ceilings: Ceilings,
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
        eprintln!(
            "  {:<34} {:>9.0} ops/s  p50 {:>8}  p95 {:>8}  p99 {:>8}  errors {}",
            summary.name,
            summary.per_s,
            stats::human_us(summary.latency.p50_us),
            stats::human_us(summary.latency.p95_us),
            stats::human_us(summary.latency.p99_us),
            summary.errors()
        );
        self.report.runs.push(summary.clone());
        summary
    }
}

/// A short unreported phase that opens the connections a measured phase will reuse.
fn warmup(load: &Load) -> Load {
    Load {
        name: format!("{} (warm-up)", load.name),
        max_ops: (load.concurrency as u64) * 8,
        show_progress: false,
        ..load.clone()
    }
}

/// Runs the selected scenarios and returns the report (written to disk by the caller).
pub async fn run(settings: Settings) -> Result<Report> {
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

    let buyers = Buyers::mint(
        &run_id,
        settings.buyers.max(settings.concurrency as u64) as usize,
    );
    let report = Report::new(settings.clone(), machine);
    let mut bench = Bench {
        settings,
        redis_prefix: format!("bench{run_id}:"),
        run_id,
        db,
        buyers,
        report,
        ceilings: Ceilings::default(),
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

async fn run_scenarios(bench: &mut Bench) -> Result<()> {
    if bench.settings.runs(Scenario::Ceilings) {
        eprintln!("scenario 5: the machine's limits");
        bench.ceilings = measure_ceilings(bench).await?;
    }
    targets::evaluate(&mut bench.report, &bench.ceilings);
    Ok(())
}

async fn measure_ceilings(bench: &mut Bench) -> Result<Ceilings> {
    let server = CeilingProcess::start().await?;
    let client = client::http_client(bench.settings.concurrency)?;
    let mut c = Ceilings::default();
    let phases = [
        ("ceiling: HTTP bare", format!("{}/v1/bare", server.plain)),
        (
            "ceiling: HTTP + buyer auth",
            format!("{}/v1/auth", server.plain),
        ),
        (
            "ceiling: HTTP + auth + middleware",
            format!("{}/v1/auth", server.stack),
        ),
    ];
    for (name, url) in phases {
        let load = bench.phase(name);
        ceiling::http::run(
            &warmup(&load),
            client.clone(),
            url.clone(),
            bench.buyers.clone(),
        )
        .await;
        let s =
            bench.keep(ceiling::http::run(&load, client.clone(), url, bench.buyers.clone()).await);
        let ok = s.outcome("ok").map_or(0.0, |o| o.per_s);
        match name {
            "ceiling: HTTP bare" => c.http_bare = ok,
            "ceiling: HTTP + buyer auth" => c.http_auth = ok,
            _ => c.http_auth_stack = ok,
        }
        check_clean(&mut bench.report, &s);
    }
    drop(server);

    let load = bench.phase("ceiling: Redis EVALSHA");
    ceiling::redis_eval::run(
        &warmup(&load),
        &bench.settings.redis_url,
        &bench.redis_prefix,
    )
    .await?;
    let s = bench.keep(
        ceiling::redis_eval::run(&load, &bench.settings.redis_url, &bench.redis_prefix).await?,
    );
    c.redis_evalsha = s.outcome("ok").map_or(0.0, |o| o.per_s);
    check_clean(&mut bench.report, &s);

    let load = bench.phase("ceiling: PostgreSQL commit");
    let url = bench.db.url();
    ceiling::pg_commit::run(&warmup(&load), &url, bench.settings.pg_connections).await?;
    let s = bench.keep(ceiling::pg_commit::run(&load, &url, bench.settings.pg_connections).await?);
    c.pg_commits = s.outcome("ok").map_or(0.0, |o| o.per_s);
    check_clean(&mut bench.report, &s);

    let r = &mut bench.report;
    r.figure("5 limits", "HTTP bare handler", c.http_bare, "req/s");
    r.figure(
        "5 limits",
        "HTTP + buyer authentication (the HTTP ceiling)",
        c.http_auth,
        "req/s",
    );
    r.figure(
        "5 limits",
        "HTTP + authentication + common middleware",
        c.http_auth_stack,
        "req/s",
    );
    r.figure(
        "5 limits",
        "Redis EVALSHA (the Redis ceiling)",
        c.redis_evalsha,
        "calls/s",
    );
    r.figure(
        "5 limits",
        "PostgreSQL single-row UPDATE commits (the commit ceiling)",
        c.pg_commits,
        "commits/s",
    );
    r.ratio(
        "HTTP + buyer authentication",
        c.http_auth,
        "HTTP bare",
        c.http_bare,
    );
    r.ratio(
        "HTTP + authentication + common middleware",
        c.http_auth_stack,
        "HTTP + buyer authentication",
        c.http_auth,
    );
    Ok(c)
}

/// A ceiling phase must answer every request correctly, or its number is not a ceiling.
fn check_clean(report: &mut Report, s: &RunSummary) {
    let errors = s.errors();
    if errors > 0 {
        let kinds: Vec<String> = s
            .outcomes
            .iter()
            .filter(|(k, _)| k.starts_with("error"))
            .map(|(k, o)| format!("{k}={}", o.count))
            .collect();
        report.note(format!(
            "{}: {errors} failed requests ({})",
            s.name,
            kinds.join(", ")
        ));
    }
}
