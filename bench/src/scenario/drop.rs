//! Scenarios 1 and 2: a drop of S units to B buyers, through the gate or straight to the
//! order service, every buyer following the path to a definite answer.

use std::sync::{atomic::Ordering, Arc};

use paysaga_common::{
    keys::DevKey,
    pass::{PassClaims, PassSigner},
};

use crate::{
    client::Buyers,
    error::Result,
    flow::Counters,
    load::{self, Load, Outcome},
    stats::RunSummary,
    system::System,
};

/// How buyers enter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Ask the gate for a pass first; only pass holders reach the order service.
    Gate,
    /// No gate: every buyer holds a valid pass (signed here with the development pass
    /// key before the clock starts) and goes to the order service.
    Direct,
}

/// What one drop measured.
#[derive(Debug, Clone)]
pub struct DropResult {
    pub summary: RunSummary,
    pub product: i64,
    /// `POST /v1/reservations` counted by the order service itself during the drop.
    pub reached_order: u64,
    pub counters: CounterValues,
}

#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CounterValues {
    pub pass_requests: u64,
    pub passes_issued: u64,
    pub reservation_requests: u64,
    pub payment_requests: u64,
    pub status_polls: u64,
    pub sold_out_at_gate: u64,
    pub sold_out_at_order: u64,
}

impl CounterValues {
    pub fn of(c: &Counters) -> Self {
        Self {
            pass_requests: c.pass_requests.load(Ordering::Relaxed),
            passes_issued: c.passes_issued.load(Ordering::Relaxed),
            reservation_requests: c.reservation_requests.load(Ordering::Relaxed),
            payment_requests: c.payment_requests.load(Ordering::Relaxed),
            status_polls: c.status_polls.load(Ordering::Relaxed),
            sold_out_at_gate: c.sold_out_at_gate.load(Ordering::Relaxed),
            sold_out_at_order: c.sold_out_at_order.load(Ordering::Relaxed),
        }
    }
}

pub struct DropSpec<'a> {
    pub load: Load,
    pub entry: Entry,
    pub product: i64,
    pub buyers: &'a Buyers,
    /// Buyer i pays from `accounts[i]`.
    pub accounts: Arc<Vec<i64>>,
}

/// Development-key passes for buyers `0..count` of `product`.
pub fn mint_passes(buyers: &Buyers, product: i64, count: usize) -> Arc<Vec<String>> {
    let signer = PassSigner::new(DevKey::Passes.signing_key());
    let exp = chrono::Utc::now().timestamp() + 3_600;
    Arc::new(
        (0..count)
            .map(|i| {
                signer.sign(&PassClaims {
                    pid: uuid::Uuid::new_v4(),
                    prd: product,
                    mem: buyers.member(i).to_owned(),
                    exp,
                })
            })
            .collect(),
    )
}

/// Runs one drop: buyer `seq` asks (gate or not), reserves, pays and waits for a terminal
/// payment. Outcomes: `completed`, `sold_out` (where is counted apart), `payment_failed`,
/// `refunded`, or an error.
pub async fn run(sys: &System, spec: DropSpec<'_>) -> Result<DropResult> {
    let passes = match spec.entry {
        Entry::Direct => Some(mint_passes(
            spec.buyers,
            spec.product,
            spec.load.max_ops as usize,
        )),
        Entry::Gate => None,
    };
    let endpoints = sys.endpoints(sys.http.clone());
    let before = sys.reservation_requests_seen_by_order().await?;
    let (entry, product, buyers, accounts) = (
        spec.entry,
        spec.product,
        spec.buyers.clone(),
        spec.accounts.clone(),
    );
    let ep = endpoints.clone();
    let summary = load::run(&spec.load, move |ctx| {
        let (ep, buyers, accounts, passes) =
            (ep.clone(), buyers.clone(), accounts.clone(), passes.clone());
        async move {
            let i = ctx.seq as usize;
            let token = buyers.token(i);
            let pass = match (entry, passes) {
                (Entry::Direct, Some(p)) => p[i % p.len()].clone(),
                _ => match ep.pass(token, product).await {
                    Ok(p) => p,
                    Err(o) => return o,
                },
            };
            let reservation = match ep.reserve(token, product, &pass).await {
                Ok(r) => r,
                Err(o) => return o,
            };
            match accounts.get(i % accounts.len().max(1)) {
                Some(&account) => ep.pay(token, reservation, account).await,
                None => Outcome::of("error:no_account"),
            }
        }
    })
    .await;
    let after = sys.reservation_requests_seen_by_order().await?;
    Ok(DropResult {
        summary,
        product,
        reached_order: after.saturating_sub(before),
        counters: CounterValues::of(&endpoints.counters),
    })
}

/// The price of every unit sold in the benchmark (minor units).
pub const PRICE: i64 = 1_000;
/// Upper bound on one drop's duration, so a stuck service cannot hang the run.
pub const DROP_TIME_BOUND: std::time::Duration = std::time::Duration::from_secs(300);

/// Records a drop's figures under `scenario`.
pub fn record_figures(
    report: &mut crate::report::Report,
    scenario: &str,
    units: u64,
    r: &DropResult,
) {
    let s = &r.summary;
    let c = &r.counters;
    let ms = |us: u64| us as f64 / 1_000.0;
    report.figure(
        scenario,
        "buyers / units",
        s.ops as f64 / units as f64,
        "buyers per unit",
    );
    report.figure(
        scenario,
        "requests reaching order (order's http_requests_total)",
        r.reached_order as f64,
        "requests",
    );
    report.figure(
        scenario,
        "requests reaching order ÷ units",
        r.reached_order as f64 / units as f64,
        "",
    );
    report.figure(scenario, "passes issued", c.passes_issued as f64, "passes");
    report.figure(
        scenario,
        "SOLD_OUT from the gate",
        c.sold_out_at_gate as f64,
        "buyers",
    );
    report.figure(
        scenario,
        "SOLD_OUT from order",
        c.sold_out_at_order as f64,
        "buyers",
    );
    // Winners' and losers' answers, each timed the same way.
    let answers = [
        (
            "completed",
            Some("winners COMPLETED"),
            "winner: p50 time to COMPLETED",
            "winner: p95 time to COMPLETED",
            "every winner COMPLETED by",
        ),
        (
            "sold_out",
            None,
            "loser: p50 time to SOLD_OUT",
            "loser: p95 time to SOLD_OUT",
            "every loser told SOLD_OUT by",
        ),
    ];
    for (outcome, count, p50, p95, all_by) in answers {
        let Some(o) = s.outcome(outcome) else {
            continue;
        };
        if let Some(count) = count {
            report.figure(scenario, count, o.count as f64, "buyers");
        }
        report.figure(scenario, p50, ms(o.latency.p50_us), "ms");
        report.figure(scenario, p95, ms(o.latency.p95_us), "ms");
        report.figure(scenario, all_by, o.last_answer_s, "s after the start");
    }
    report.figure(
        scenario,
        "payment status polls",
        c.status_polls as f64,
        "GETs",
    );
}
