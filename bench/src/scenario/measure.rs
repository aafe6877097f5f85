//! Scenarios 1, 2 and 4 against one running system, and the gate's sustained-load phases.

use std::{sync::Arc, time::Duration};

use crate::{
    error::Result,
    flow::Endpoints,
    invariants,
    memory::{self, ProcessMemory, Sampler},
    report::MemoryRow,
    scenario::{
        drop::{self, DropSpec, Entry, DROP_TIME_BOUND, PRICE},
        gate, saga,
    },
    system::System,
    warmup, Bench,
};

/// Enough for every buyer to pay in every drop and the saga several times over.
pub const OPENING_BALANCE: i64 = PRICE * 1_000;

fn endpoints(sys: &System) -> Endpoints {
    sys.endpoints(sys.http.clone())
}

async fn redis_pid(url: &str) -> Option<u32> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
}

/// Scenario 1, `--drops` times back to back (memory sampled during each), first drop's
/// figures reported.
pub async fn drops_with_gate(
    bench: &mut Bench,
    sys: &System,
    accounts: &Arc<Vec<i64>>,
) -> Result<()> {
    let units = bench.settings.units;
    let redis = redis_pid(&bench.settings.redis_url).await;
    let mut peaks: Vec<Vec<ProcessMemory>> = Vec::new();
    let drops = bench.settings.drops;
    for round in 1..=drops {
        let product = sys
            .create_product(&format!("drop with gate {round}"), PRICE, units)
            .await?;
        sys.wait_quota(product, units as i64, gate::QUOTA_WAIT)
            .await?;
        let mut processes = sys.pids();
        if let Some(pid) = redis {
            processes.push(("redis-server (shared)".into(), pid));
        }
        let sampler = Sampler::start(processes);
        let name = format!("1 drop with gate #{round}");
        let load = bench.load(&name, bench.settings.buyers, DROP_TIME_BOUND);
        let spec = DropSpec {
            load,
            entry: Entry::Gate,
            product,
            buyers: &bench.buyers,
            accounts: accounts.clone(),
        };
        let result = drop::run(sys, spec).await?;
        let mem = sampler.stop().await;
        let summary = bench.keep(result.summary.clone());
        for m in &mem {
            bench.report.memory.push(MemoryRow {
                phase: name.clone(),
                process: m.clone(),
            });
        }
        let pool = sys.admin_pool().await;
        invariants::check_drop(
            &mut bench.report,
            &name,
            &pool,
            product,
            units,
            summary.count("completed"),
        )
        .await?;
        if round == drops {
            invariants::check_system(&mut bench.report, "after 1", &pool).await?;
        }
        pool.close().await;
        if round == 1 {
            drop::record_figures(&mut bench.report, "1 drop with gate", units, &result);
            bench.measured.units = units;
            bench.measured.gate_drop_reached_order = Some(result.reached_order);
            bench.measured.gate_drop_loser_p95_us =
                summary.outcome("sold_out").map(|o| o.latency.p95_us);
        }
        peaks.push(mem);
    }
    let services: Vec<String> = sys.pids().into_iter().map(|(n, _)| n).collect();
    let peak_of = |round: &[ProcessMemory], name: &str| {
        round
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.peak_rss_kib)
    };
    for name in &services {
        let highest = peaks
            .iter()
            .filter_map(|r| peak_of(r, name))
            .max()
            .unwrap_or(0);
        bench
            .measured
            .service_peak_mib
            .push((name.clone(), highest as f64 / 1024.0));
        let last_two: Vec<u64> = peaks
            .iter()
            .rev()
            .take(2)
            .filter_map(|r| peak_of(r, name))
            .collect();
        if let [last, before] = last_two[..] {
            bench.report.figure(
                "1 drop with gate",
                &format!("{name}: peak RSS change in the last drop"),
                (last as f64 - before as f64) / 1024.0,
                "MiB",
            );
        }
        if let (Some(first), Some(last)) = (
            peaks.first().and_then(|r| peak_of(r, name)),
            peaks.last().and_then(|r| peak_of(r, name)),
        ) {
            let growth = (last as f64 - first as f64) / 1024.0;
            if bench
                .measured
                .rss_growth_mib
                .as_ref()
                .is_none_or(|(_, g)| growth > *g)
            {
                bench.measured.rss_growth_mib = Some((name.clone(), growth));
            }
        }
    }
    Ok(())
}

/// Scenario 2: the same drop, buyers straight to the order service.
pub async fn drop_direct(bench: &mut Bench, sys: &System, accounts: &Arc<Vec<i64>>) -> Result<()> {
    let units = bench.settings.units;
    let product = sys
        .create_product("drop without gate", PRICE, units)
        .await?;
    let name = "2 drop without gate";
    let load = bench.load(name, bench.settings.buyers, DROP_TIME_BOUND);
    let spec = DropSpec {
        load,
        entry: Entry::Direct,
        product,
        buyers: &bench.buyers,
        accounts: accounts.clone(),
    };
    let result = drop::run(sys, spec).await?;
    let summary = bench.keep(result.summary.clone());
    let pool = sys.admin_pool().await;
    invariants::check_drop(
        &mut bench.report,
        name,
        &pool,
        product,
        units,
        summary.count("completed"),
    )
    .await?;
    invariants::check_system(&mut bench.report, "after 2", &pool).await?;
    pool.close().await;
    drop::record_figures(&mut bench.report, name, units, &result);
    bench.measured.units = units;
    bench.measured.direct_drop_reached_order = Some(result.reached_order);
    bench.measured.direct_drop_loser_p95_us = summary.outcome("sold_out").map(|o| o.latency.p95_us);
    let m = &bench.measured;
    if let (Some(g), Some(d)) = (m.gate_drop_reached_order, m.direct_drop_reached_order) {
        bench.report.ratio(
            "requests reaching order: without gate ÷ with gate",
            d as f64,
            "with gate",
            g as f64,
        );
    }
    if let (Some(g), Some(d)) = (m.gate_drop_loser_p95_us, m.direct_drop_loser_p95_us) {
        bench.report.ratio(
            "losers' p95 to SOLD_OUT (µs): without gate ÷ with gate",
            d as f64,
            "with gate",
            g as f64,
        );
    }
    Ok(())
}

/// The gate at sustained load: passes to distinct buyers while quota lasts, then
/// sold-out answers; Redis bytes per in-flight pass.
pub async fn gate_throughput(bench: &mut Bench, sys: &System) -> Result<()> {
    let n: u64 = if bench.settings.quick { 5_000 } else { 60_000 };
    let warm = (bench.settings.concurrency as u64 * 8).min(n / 10);
    // Every pass goes to a buyer of its own: `n` more members, with accounts but no money.
    let pass_buyers = sys
        .seed_buyers(&format!("{}p", bench.run_id), n as usize, 0)
        .await?
        .buyers;
    let product = sys.create_product("gate throughput", PRICE, n).await?;
    sys.wait_quota(product, n as i64, gate::QUOTA_WAIT).await?;
    let client = redis::Client::open(bench.settings.redis_url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let used_before = memory::redis_info(&mut conn).await?.used_memory;

    let before = crate::ceiling::measure::adjacent_http_auth(bench, "1b before").await?;
    let load = bench.load("1b gate: pass issuance", n - warm, bench.settings.phase);
    gate::passes(&warmup(&load), sys, pass_buyers.clone(), product, 0).await;
    let cpu_before = crate::cpu::snapshot(&sys.pids());
    let s = bench.keep(gate::passes(&load, sys, pass_buyers.clone(), product, warm as usize).await);
    let cpu = crate::cpu::between(&cpu_before, &crate::cpu::snapshot(&sys.pids()));
    cpu.record(&mut bench.report, "1b gate", s.count("pass"), "pass");
    let pass_rate = s.outcome("pass").map_or(0.0, |o| o.per_s);
    bench.measured.pass_rate = Some(pass_rate);

    let mem = gate::pass_memory(sys, &bench.settings.redis_url, product, used_before).await?;
    let per_pass = mem.bytes as f64 / mem.in_flight.max(1) as f64;
    bench.measured.bytes_per_pass = Some(per_pass);
    let r = &mut bench.report;
    r.figure(
        "1b gate",
        "passes in flight after the issuance phase",
        mem.in_flight as f64,
        "passes",
    );
    r.figure(
        "1b gate",
        "Redis bytes of the gate's keys (MEMORY USAGE)",
        mem.bytes as f64,
        "bytes",
    );
    r.figure(
        "1b gate",
        "Redis bytes per in-flight pass",
        per_pass,
        "bytes",
    );
    r.figure(
        "1b gate",
        "Redis used_memory delta (server-wide, shared) per pass",
        mem.used_memory_delta as f64 / mem.in_flight.max(1) as f64,
        "bytes",
    );
    r.figure("1b gate", "gate's Redis keys", mem.keys as f64, "keys");

    let sold_out = sys.create_product("gate sold out", PRICE, 1).await?;
    sys.wait_quota(sold_out, 1, gate::QUOTA_WAIT).await?;
    let first = bench.load("1b gate: the one pass", 1, Duration::from_secs(10));
    gate::passes(&first, sys, pass_buyers, sold_out, 0).await;
    let load = bench.phase("1b gate: sold-out answers");
    gate::passes(&warmup(&load), sys, bench.buyers.clone(), sold_out, 1).await;
    let s = bench.keep(gate::passes(&load, sys, bench.buyers.clone(), sold_out, 1).await);
    let sold_out_rate = s.outcome("sold_out_at_gate").map_or(0.0, |o| o.per_s);
    bench.measured.sold_out_rate = Some(sold_out_rate);
    let after = crate::ceiling::measure::adjacent_http_auth(bench, "1b after").await?;
    let beside = (before + after) / 2.0;
    bench.measured.http_auth_beside_gate = Some(beside);
    let c = bench.ceilings;
    for (name, rate) in [
        ("gate pass issuance", pass_rate),
        ("gate sold-out answers", sold_out_rate),
    ] {
        bench
            .report
            .ratio(name, rate, "HTTP + buyer auth (scenario 5)", c.http_auth);
        bench.report.ratio(
            name,
            rate,
            "HTTP + buyer auth, mean of before/after",
            beside,
        );
    }
    bench.report.ratio(
        "gate pass issuance",
        pass_rate,
        "Redis EVALSHA",
        c.redis_evalsha,
    );
    bench.report.note(format!(
        "Sold-out phase: buyers' tokens cycle over {} members, so the gate's verified-token cache answers repeats; \
         the HTTP ceiling verifies every token (its cost is the ceiling's).",
        bench.buyers.len()
    ));
    Ok(())
}

/// Scenario 4: reserve `n` units, then pay them all; payments per second and commits per
/// payment from pg_stat_database.
pub async fn saga_throughput(
    bench: &mut Bench,
    sys: &System,
    accounts: &Arc<Vec<i64>>,
) -> Result<()> {
    let n: u64 = if bench.settings.quick { 300 } else { 2_000 };
    let n = n.min(bench.buyers.len() as u64);
    let product = sys.create_product("saga throughput", PRICE, n * 2).await?;
    let ep = endpoints(sys);
    let load = bench.load("4 saga: reserve (no gate)", n, DROP_TIME_BOUND);
    let (reserved, slots) = saga::reserve(&load, ep.clone(), bench.buyers.clone(), product).await;
    bench.keep(reserved);

    let pool = sys.admin_pool().await;
    tokio::time::sleep(saga::STATS_SETTLE).await;
    let c0 = saga::xact_commit(&pool).await?;
    let idle = Duration::from_secs(5);
    tokio::time::sleep(idle).await;
    let c1 = saga::xact_commit(&pool).await?;
    let writes_before = saga::table_writes(&pool).await?;
    let background_per_s = (c1 - c0) as f64 / idle.as_secs_f64();

    let cpu_before = crate::cpu::snapshot(&sys.pids());
    let load = bench.load("4 saga: pay", n, DROP_TIME_BOUND);
    let paid = bench.keep(
        saga::pay(
            &load,
            ep.clone(),
            bench.buyers.clone(),
            accounts.clone(),
            slots,
        )
        .await,
    );
    let cpu = crate::cpu::between(&cpu_before, &crate::cpu::snapshot(&sys.pids()));
    tokio::time::sleep(saga::STATS_SETTLE).await;
    let c2 = saga::xact_commit(&pool).await?;
    let writes_after = saga::table_writes(&pool).await?;
    let completed = paid.count("completed");
    let polls = ep
        .counters
        .status_polls
        .load(std::sync::atomic::Ordering::Relaxed);
    let window = paid.elapsed_s + saga::STATS_SETTLE.as_secs_f64();
    let raw = (c2 - c1) as f64;
    let net = raw - background_per_s * window;
    let per_payment = net / completed.max(1) as f64;
    let per_s = paid.outcome("completed").map_or(0.0, |o| o.per_s);
    invariants::check_drop(
        &mut bench.report,
        "4 saga",
        &pool,
        product,
        n * 2,
        completed,
    )
    .await?;
    invariants::check_system(&mut bench.report, "after 4", &pool).await?;
    pool.close().await;

    let r = &mut bench.report;
    r.figure("4 saga", "payments COMPLETED", completed as f64, "payments");
    r.figure(
        "4 saga",
        "payments per second, end to end",
        per_s,
        "payments/s",
    );
    r.figure(
        "4 saga",
        "commits in the paying window (pg_stat_database.xact_commit)",
        raw,
        "commits",
    );
    r.figure(
        "4 saga",
        "background commits while idle",
        background_per_s,
        "commits/s",
    );
    r.figure(
        "4 saga",
        "payment status polls (each at least one read-only commit)",
        polls as f64,
        "GETs",
    );
    r.figure(
        "4 saga",
        "PostgreSQL commits per payment (background subtracted)",
        per_payment,
        "commits",
    );
    let ceiling = bench.ceilings.pg_commits / per_payment.max(1e-9);
    r.ratio(
        "payments/s",
        per_s,
        "commit ceiling ÷ commits per payment",
        ceiling,
    );
    cpu.record(&mut bench.report, "4 saga", completed, "payment");
    // Where the commits go: rows written per payment, by table (a profile of the saga).
    for (table, after) in &writes_after {
        let delta = after - writes_before.get(table).copied().unwrap_or(0);
        if delta > 0 {
            bench.report.figure(
                "4 saga",
                &format!("rows written per payment: {table}"),
                delta as f64 / completed.max(1) as f64,
                "rows",
            );
        }
    }
    bench.measured.payments_per_s = Some(per_s);
    bench.measured.commits_per_payment = Some(per_payment);
    Ok(())
}

/// Signs the run's buyers up through `sys`'s member service, each with a funded account,
/// and makes them the run's buyers; returns their accounts in buyer order.
pub async fn seed_buyers(bench: &mut Bench, sys: &System) -> Result<Arc<Vec<i64>>> {
    let count = crate::buyer_count(&bench.settings);
    let seeded = sys
        .seed_buyers(&bench.run_id, count, OPENING_BALANCE)
        .await?;
    bench.buyers = seeded.buyers;
    Ok(seeded.accounts)
}
