//! Part 6: whole checkouts, each buyer's reserve + pay-until-terminal timed as one operation,
//! at several concurrencies, with PostgreSQL commits and CPU by process per checkout.
//!
//! This is the unit of work the peers (../shared/peers) count: one request per buyer that
//! reserves, debits and confirms. The saga part times the paying alone, after every
//! reservation was made, so its figures do not compare with theirs; these do.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use paysaga_common::{
    keys::DevKey,
    pass::{PassClaims, PassSigner},
};

use crate::{
    client::{self, Buyers},
    cpu,
    error::Result,
    flow::{Counters, Endpoints},
    invariants,
    load::{self, Load, Outcome},
    report::CheckoutRow,
    scenario::{drop::PRICE, saga},
    stats::{human_us, RunSummary},
    system::System,
    Bench,
};

/// Upper bound on one level's timed phase, so a stuck service cannot hang the run; far
/// above what 3,000 checkouts take even on a debug build.
const PHASE_TIME_BOUND: Duration = Duration::from_secs(600);
/// How long the idle background commit rate is sampled before each level.
const IDLE_SAMPLE: Duration = Duration::from_secs(5);

/// Runs every level of `--checkout-clients`, against the already started system.
pub async fn measure(bench: &mut Bench, sys: &System, accounts: &Arc<Vec<i64>>) -> Result<()> {
    let n = bench.settings.checkout_buyers as usize;
    let mut first = 0;
    for clients in bench.settings.checkout_clients.clone() {
        let row = level(bench, sys, accounts, clients, first).await?;
        eprintln!(
            "  checkout clients={} buyers={} checkouts/s={:.0} p50={} p95={} p99={} completed={} failed={} errors={} commits/checkout={:.2} invariants={}",
            row.clients,
            row.buyers,
            row.checkouts_per_s,
            human_us(row.p50_us),
            human_us(row.p95_us),
            human_us(row.p99_us),
            row.completed,
            row.failed,
            row.errors.values().sum::<u64>(),
            row.commits_per_checkout,
            if row.invariants_hold { "hold" } else { "BROKEN" }
        );
        bench.report.checkout.push(row);
        // Each level gets buyers whose accounts no earlier level touched, while the run
        // has enough of them, as the peers start every level on fresh accounts.
        first = (first + n) % bench.buyers.len().max(1);
    }
    Ok(())
}

/// One level: a fresh product, a warm-up on a product of its own, then `checkout_buyers`
/// buyers from `first` (wrapping) each doing one timed checkout.
async fn level(
    bench: &mut Bench,
    sys: &System,
    accounts: &Arc<Vec<i64>>,
    clients: usize,
    first: usize,
) -> Result<CheckoutRow> {
    let n = bench.settings.checkout_buyers as usize;
    let scenario = format!("6 checkout, {clients} clients");
    let http = client::http_client(clients)?;
    let ep = sys.endpoints(http);
    let progress = bench.settings.progress;
    let phase = |name: String, ops: usize| Load {
        show_progress: progress,
        ..Load::new(name, clients, ops as u64, PHASE_TIME_BOUND)
    };

    // One checkout per client opens every connection, the buyers' and the services' own,
    // on a product of its own so the measured product's invariants stay exact.
    let warm_product = sys
        .create_product(
            &format!("checkout warm-up, {clients} clients"),
            PRICE,
            clients as u64,
        )
        .await?;
    let warm = checkouts(
        &phase(format!("{scenario} (warm-up)"), clients),
        ep.clone(),
        &bench.buyers,
        accounts,
        warm_product,
        first,
    )
    .await;
    eprintln!("{}", warm.line());

    // Ample stock: claims never run short, as with the peers' 100,000 units.
    let stock = 2 * n as u64;
    let product = sys
        .create_product(&format!("checkout, {clients} clients"), PRICE, stock)
        .await?;
    let pool = sys.admin_pool().await;
    tokio::time::sleep(saga::STATS_SETTLE).await;
    let c0 = saga::xact_commit(&pool).await?;
    tokio::time::sleep(IDLE_SAMPLE).await;
    let c1 = saga::xact_commit(&pool).await?;
    let background_per_s = (c1 - c0) as f64 / IDLE_SAMPLE.as_secs_f64();
    let writes_before = saga::table_writes(&pool).await?;

    let ep_measured = Endpoints {
        counters: Arc::new(Counters::default()),
        ..ep
    };
    let cpu_before = cpu::snapshot(&sys.pids());
    let summary = checkouts(
        &phase(scenario.clone(), n),
        ep_measured.clone(),
        &bench.buyers,
        accounts,
        product,
        first,
    )
    .await;
    let cpu_used = cpu::between(&cpu_before, &cpu::snapshot(&sys.pids()));
    let summary = bench.keep(summary);
    tokio::time::sleep(saga::STATS_SETTLE).await;
    let c2 = saga::xact_commit(&pool).await?;
    let writes_after = saga::table_writes(&pool).await?;

    let completed = summary.count("completed");
    let invariants_from = bench.report.invariants.len();
    invariants::check_drop(
        &mut bench.report,
        &scenario,
        &pool,
        product,
        stock,
        completed,
    )
    .await?;
    invariants::check_system(&mut bench.report, &scenario, &pool).await?;
    pool.close().await;
    let invariants_hold = bench.report.invariants[invariants_from..]
        .iter()
        .all(|i| i.ok);

    let per = |v: f64| v / completed.max(1) as f64;
    let raw = (c2 - c1) as f64;
    let window = summary.elapsed_s + saga::STATS_SETTLE.as_secs_f64();
    for (table, after) in &writes_after {
        let delta = after - writes_before.get(table).copied().unwrap_or(0);
        if delta > 0 {
            bench.report.figure(
                &scenario,
                &format!("rows written per checkout: {table}"),
                per(delta as f64),
                "rows",
            );
        }
    }
    let polls = ep_measured
        .counters
        .status_polls
        .load(std::sync::atomic::Ordering::Relaxed);
    let (failed, errors) = tally(&summary);
    Ok(CheckoutRow {
        clients,
        buyers: n as u64,
        completed,
        failed,
        errors,
        elapsed_s: summary.elapsed_s,
        checkouts_per_s: completed as f64 / summary.elapsed_s,
        p50_us: summary.latency.p50_us,
        p95_us: summary.latency.p95_us,
        p99_us: summary.latency.p99_us,
        max_us: summary.latency.max_us,
        commits_per_checkout_raw: per(raw),
        commits_per_checkout: per(raw - background_per_s * window),
        background_commits_per_s: background_per_s,
        status_polls_per_checkout: per(polls as f64),
        cpu_ms_per_checkout: cpu_per_checkout(&cpu_used, completed),
        invariants_hold,
    })
}

/// `load.max_ops` checkouts of `product`, operation `i` by buyer `first + i` (wrapping):
/// reserve with a development pass, then pay and poll until the payment is terminal, all
/// inside the one timed operation.
async fn checkouts(
    load: &Load,
    ep: Endpoints,
    buyers: &Buyers,
    accounts: &Arc<Vec<i64>>,
    product: i64,
    first: usize,
) -> RunSummary {
    let count = load.max_ops as usize;
    let index = Arc::new(
        (0..count)
            .map(|i| (first + i) % buyers.len().max(1))
            .collect::<Vec<_>>(),
    );
    // Signed before the clock starts: a pass is the gate's work, not the checkout's.
    let passes = Arc::new(passes(buyers, product, &index));
    let (buyers, accounts) = (buyers.clone(), accounts.clone());
    load::run(load, move |ctx| {
        let (ep, buyers, accounts, passes, index) = (
            ep.clone(),
            buyers.clone(),
            accounts.clone(),
            passes.clone(),
            index.clone(),
        );
        async move {
            let i = ctx.seq as usize;
            let b = index[i];
            let token = buyers.token(b);
            let reservation = match ep.reserve(token, product, &passes[i]).await {
                Ok(r) => r,
                Err(o) => return at_step("reserve", o),
            };
            match accounts.get(b) {
                Some(&account) => at_step("pay", ep.pay(token, reservation, account).await),
                None => Outcome::of("error:no_account"),
            }
        }
    })
    .await
}

/// An error labelled with the step that met it (`error:pay:503:UNAVAILABLE`): one timed
/// operation spans two services, and the code alone does not say which one answered.
fn at_step(step: &str, o: Outcome) -> Outcome {
    match o.0.strip_prefix("error:") {
        Some(rest) => Outcome::error(format!("{step}:{rest}")),
        None => o,
    }
}

/// One development-key pass of `product` per entry of `index` (a buyer index).
fn passes(buyers: &Buyers, product: i64, index: &[usize]) -> Vec<String> {
    let signer = PassSigner::new(DevKey::Passes.signing_key());
    let exp = chrono::Utc::now().timestamp() + 3_600;
    index
        .iter()
        .map(|&b| {
            signer.sign(&PassClaims {
                pid: uuid::Uuid::new_v4(),
                prd: product,
                mem: buyers.member(b).to_owned(),
                exp,
            })
        })
        .collect()
}

/// Payments that ended FAILED or REFUNDED, and every other outcome but `completed` by label.
fn tally(s: &RunSummary) -> (u64, BTreeMap<String, u64>) {
    let failed = s.count("payment_failed") + s.count("refunded");
    let errors = s
        .outcomes
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "completed" | "payment_failed" | "refunded"))
        .map(|(k, o)| (k.clone(), o.count))
        .collect();
    (failed, errors)
}

/// CPU milliseconds per completed checkout: each service, PostgreSQL, the benchmark's
/// clients, the rest of the machine, and the whole machine.
fn cpu_per_checkout(c: &cpu::CpuUse, completed: u64) -> Vec<(String, f64)> {
    let per = |s: f64| s * 1_000.0 / completed.max(1) as f64;
    c.by_process
        .iter()
        .map(|(name, s)| (name.clone(), per(*s)))
        .chain([
            ("postgres".to_owned(), per(c.postgres_s)),
            ("bench".to_owned(), per(c.bench_s)),
            ("others".to_owned(), per(c.others_s)),
            ("machine".to_owned(), per(c.machine_s)),
        ])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{new_histogram, record, Latency, OutcomeSummary};

    #[test]
    fn outcomes_split_into_completed_failed_and_errors() {
        let mut h = new_histogram();
        record(&mut h, Duration::from_millis(5));
        let o = |count| OutcomeSummary {
            count,
            per_s: 0.0,
            latency: Latency::of(&h),
            last_answer_s: 0.0,
        };
        let s = RunSummary {
            name: "c".into(),
            concurrency: 1,
            ops: 10,
            elapsed_s: 1.0,
            per_s: 10.0,
            latency: Latency::of(&h),
            outcomes: [
                ("completed", 5),
                ("payment_failed", 1),
                ("refunded", 1),
                ("sold_out", 1),
                ("error:503:UNAVAILABLE", 2),
            ]
            .into_iter()
            .map(|(k, n)| (k.to_owned(), o(n)))
            .collect(),
        };
        let (failed, errors) = tally(&s);
        assert_eq!(failed, 2);
        assert_eq!(
            errors.into_iter().collect::<Vec<_>>(),
            vec![
                ("error:503:UNAVAILABLE".to_owned(), 2),
                ("sold_out".to_owned(), 1)
            ]
        );
    }

    #[test]
    fn errors_name_their_step() {
        assert_eq!(
            at_step("pay", Outcome::of("error:503:UNAVAILABLE")).0,
            "error:pay:503:UNAVAILABLE"
        );
        assert_eq!(at_step("reserve", Outcome::of("sold_out")).0, "sold_out");
        assert_eq!(at_step("pay", Outcome::of("completed")).0, "completed");
    }

    #[test]
    fn cpu_is_divided_by_completed_checkouts() {
        let c = cpu::CpuUse {
            by_process: vec![("order".into(), 2.0)],
            postgres_s: 4.0,
            bench_s: 1.0,
            machine_s: 10.0,
            others_s: 3.0,
        };
        let v = cpu_per_checkout(&c, 1_000);
        let names: Vec<&str> = v.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["order", "postgres", "bench", "others", "machine"]);
        assert_eq!(v[0].1, 2.0);
        assert_eq!(v[4].1, 10.0);
    }
}
