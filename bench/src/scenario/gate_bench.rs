//! The gate's own benchmark (`gate::bench`, in-process gate and ceilings, tokens verified
//! once beforehand so its ceiling uses the gate's token cache), run here with this run's
//! concurrency and folded into the report beside the out-of-process measurements.

use std::collections::BTreeMap;

use gate::bench::{self, BenchConfig, LoadStats};

use crate::{
    error::{Error, Result},
    stats::{Latency, OutcomeSummary, RunSummary},
    Bench,
};

fn latency(s: &LoadStats, status: Option<u16>) -> Latency {
    let us = |q: f64| s.quantile(q, status).as_micros() as u64;
    Latency {
        p50_us: us(0.5),
        p95_us: us(0.95),
        p99_us: us(0.99),
        max_us: us(1.0),
        mean_us: 0.0,
    }
}

fn summary(s: &LoadStats) -> RunSummary {
    let secs = s.elapsed.as_secs_f64().max(1e-9);
    let outcomes: BTreeMap<String, OutcomeSummary> = s
        .by_status
        .iter()
        .map(|(&status, &count)| {
            let label = match status {
                200 | 201 => format!("http_{status}"),
                409 => "sold_out".to_owned(),
                other => format!("error:http_{other}"),
            };
            let o = OutcomeSummary {
                count: count as u64,
                per_s: count as f64 / secs,
                latency: latency(s, Some(status)),
                last_answer_s: secs,
            };
            (label, o)
        })
        .collect();
    RunSummary {
        name: format!("1c gate-bench (in-process): {}", s.label),
        concurrency: s.connections,
        ops: s.requests as u64,
        elapsed_s: secs,
        per_s: s.throughput(),
        latency: latency(s, None),
        outcomes,
    }
}

pub async fn measure(bench: &mut Bench) -> Result<()> {
    let cfg = BenchConfig {
        redis_url: bench.settings.redis_url.clone(),
        connections: bench.settings.concurrency,
        requests: if bench.settings.quick { 5_000 } else { 20_000 },
        drop_units: bench.settings.units as i64,
        drop_buyers: bench.settings.buyers as usize,
        drop_connections: bench.settings.concurrency,
        ..BenchConfig::default()
    };
    let r = bench::run(&cfg)
        .await
        .map_err(|e| Error::Setup(format!("gate bench: {e:#}")))?;
    for s in [
        &r.bare,
        &r.ceiling,
        &r.ceiling_uncached,
        &r.issue,
        &r.sold_out,
        &r.drop,
    ] {
        bench.keep(summary(s));
    }
    let rep = &mut bench.report;
    rep.figure(
        "1c gate-bench",
        "Redis bytes per in-flight pass (MEMORY USAGE of holders)",
        r.redis_bytes_per_pass,
        "bytes",
    );
    rep.ratio(
        "gate-bench pass issuance",
        r.issue.throughput(),
        "its cached-auth ceiling",
        r.ceiling.throughput(),
    );
    rep.ratio(
        "gate-bench sold-out answers",
        r.sold_out.throughput(),
        "its cached-auth ceiling",
        r.ceiling.throughput(),
    );
    rep.ratio(
        "gate-bench cached-auth ceiling",
        r.ceiling.throughput(),
        "uncached (Buyer + Verifier)",
        r.ceiling_uncached.throughput(),
    );
    Ok(())
}
