//! The gate's own benchmark (`benches::gate`: in-process gate and ceilings, tokens
//! verified once beforehand so its ceiling uses the gate's token cache), run here with
//! this run's concurrency and folded into the report beside the out-of-process rows.

use crate::{
    benches::gate::{self, BenchConfig},
    error::{Error, Result},
    Bench,
};

pub async fn measure(bench: &mut Bench) -> Result<()> {
    let cfg = BenchConfig {
        redis_url: bench.settings.redis_url.clone(),
        connections: bench.settings.concurrency,
        requests: if bench.settings.quick { 5_000 } else { 20_000 },
        drop_units: bench.settings.units as i64,
        drop_buyers: bench.settings.buyers as usize,
        drop_connections: bench.settings.concurrency,
        progress: bench.settings.progress,
        ..BenchConfig::default()
    };
    let r = gate::run(&cfg)
        .await
        .map_err(|e| Error::Setup(format!("gate bench: {e:#}")))?;
    for s in r.rows() {
        let mut s = s.clone();
        s.name = format!("1c gate-bench (in-process): {}", s.name);
        bench.keep(s);
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
        r.issue.per_s,
        "its cached-auth ceiling",
        r.ceiling.per_s,
    );
    rep.ratio(
        "gate-bench sold-out answers",
        r.sold_out.per_s,
        "its cached-auth ceiling",
        r.ceiling.per_s,
    );
    rep.ratio(
        "gate-bench cached-auth ceiling",
        r.ceiling.per_s,
        "uncached (Buyer + Verifier)",
        r.ceiling_uncached.per_s,
    );
    Ok(())
}
