//! Scenario 3: claim strategies on one database and the same data, run by the order
//! service's own claim bench (`order::claim_bench`), folded into this report.

use std::collections::BTreeMap;

use order::claim_bench::{self, BenchConfig, RunResult, Strategy};

use crate::{
    error::{Error, Result},
    stats::{Latency, OutcomeSummary, RunSummary},
    Bench,
};

fn latency(r: &RunResult) -> Latency {
    let us = |ms: f64| (ms * 1_000.0).round() as u64;
    Latency {
        p50_us: us(r.p50_ms),
        p95_us: us(r.p95_ms),
        p99_us: us(r.p99_ms),
        max_us: 0,
        mean_us: 0.0,
    }
}

fn summary(r: &RunResult) -> RunSummary {
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let mut outcomes = BTreeMap::new();
    for (label, count) in [
        ("claimed", r.successes),
        ("sold_out", r.sold_out),
        ("retries_exhausted", r.exhausted),
        ("error", r.errors),
    ] {
        if count > 0 {
            // The order bench keeps one histogram per run, so per-outcome latency is the run's.
            let o = OutcomeSummary {
                count,
                per_s: count as f64 / secs,
                latency: latency(r),
                last_answer_s: secs,
            };
            outcomes.insert(label.to_owned(), o);
        }
    }
    RunSummary {
        name: format!("3 claims: {}: {}", r.scenario, r.strategy.name()),
        concurrency: r.concurrency,
        ops: r.claims as u64,
        elapsed_s: secs,
        per_s: r.throughput(),
        latency: latency(r),
        outcomes,
    }
}

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
        ..defaults
    };
    let rows = claim_bench::run(&cfg, |r| {
        eprintln!("  claims: {} / {} done", r.scenario, r.strategy.name())
    })
    .await
    .map_err(|e| Error::Setup(format!("order claim bench: {e:#}")))?;
    for r in &rows {
        bench.keep(summary(r));
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
                r.oversold, r.successes, r.stock
            ),
        );
    }
    let p95 = |scenario_prefix: &str, s: Strategy| {
        rows.iter()
            .find(|r| r.strategy == s && r.scenario.starts_with(scenario_prefix))
            .map(|r| r.p95_ms * 1_000.0)
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
    // The last run at each stock: the order bench may repeat a stock to interleave
    // (its first run then warms the table).
    let cycles = |stock: i64| {
        rows.iter()
            .rev()
            .find(|r| r.stock == stock && r.scenario.starts_with("claim+release"))
            .map(|r| r.p95_ms)
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
