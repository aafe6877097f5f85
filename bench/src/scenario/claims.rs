//! Scenario 3: claim strategies on one database and the same data, run by the claim
//! bench (`benches::claims`), folded into this report.

use crate::{
    benches::claims::{self, BenchConfig, Strategy},
    error::{Error, Result},
    Bench,
};

pub async fn measure(bench: &mut Bench) -> Result<()> {
    let defaults = BenchConfig::default();
    let cfg = BenchConfig {
        admin_url: bench.settings.admin_database_url.clone(),
        large_stock: if bench.settings.quick {
            100_000
        } else {
            defaults.large_stock
        },
        cycles: if bench.settings.quick {
            500
        } else {
            defaults.cycles
        },
        progress: bench.settings.progress,
        ..defaults
    };
    let rows = claims::run(&cfg, |r| {
        eprintln!("  claims: {} / {} done", r.scenario, r.strategy.name())
    })
    .await
    .map_err(|e| Error::Setup(format!("claim bench: {e:#}")))?;
    for r in &rows {
        bench.keep(r.summary.clone());
        let naive = r.strategy == Strategy::NaiveReadThenWrite;
        bench.report.invariant(
            &format!("3 claims: {}", r.scenario),
            &format!(
                "{}: oversold {}",
                r.strategy.name(),
                if naive {
                    "(naive: expected > 0 under contention)"
                } else {
                    "= 0"
                }
            ),
            naive || r.oversold == 0,
            format!(
                "oversold {}, {} successes for stock {}",
                r.oversold,
                r.summary.count("claimed"),
                r.stock
            ),
        );
    }
    let p95 = |scenario_prefix: &str, s: Strategy| {
        rows.iter()
            .find(|r| r.strategy == s && r.scenario.starts_with(scenario_prefix))
            .map(|r| r.summary.latency.p95_us as f64)
    };
    let plenty = format!("{} claims for", cfg.plenty_claims);
    let scarce = format!("{} claims for", cfg.scarce_claims);
    bench.measured.claim_p95_skip_locked_us = p95(&plenty, Strategy::SkipLockedUnits);
    bench.measured.claim_p95_counter_us = p95(&plenty, Strategy::CounterForUpdate);
    if let (Some(a), Some(b)) = (
        p95(&scarce, Strategy::SkipLockedUnits),
        p95(&scarce, Strategy::CounterForUpdate),
    ) {
        bench.report.figure(
            "3 claims",
            "contended run: SKIP LOCKED p95 ÷ counter FOR UPDATE p95",
            a / b.max(1e-9),
            "",
        );
    }
    // The last run at each stock: the small stock runs twice to interleave (its first
    // run then warms the table).
    let cycles = |stock: i64| {
        rows.iter()
            .rev()
            .find(|r| r.stock == stock && r.scenario.starts_with("claim+release"))
            .map(|r| r.p95_ms())
    };
    if let (Some(small), Some(large)) = (cycles(cfg.small_stock), cycles(cfg.large_stock)) {
        bench.report.figure(
            "3 claims",
            &format!("SKIP LOCKED p95 at {} units", cfg.small_stock),
            small,
            "ms",
        );
        bench.report.figure(
            "3 claims",
            &format!("SKIP LOCKED p95 at {} units", cfg.large_stock),
            large,
            "ms",
        );
    }
    Ok(())
}
