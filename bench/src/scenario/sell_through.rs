//! Part 7, sell-through: a drop of N units to ten buyers per unit arriving at once, every
//! eighth of them unable to pay. Every buyer told SOLD_OUT joins the product's waitlist
//! and buys the unit offered to it, so each unit whose payment fails goes to the next
//! in line instead of back on sale after everyone was turned away. Reported from
//! PostgreSQL: units sold of units on sale, sales through the waitlist, offers made,
//! taken and expired, failed payments, the time from a unit's return to the next
//! waiter's COMPLETED, and every invariant (the checker the tests use).
//!
//! The buyers are the end-to-end tests' (`paysaga_drop::Driver` with a waitlist
//! policy), against a system of its own, started with a short offer deadline.

use std::time::{Duration, Instant};

use paysaga_drop::{
    invariants as drop_invariants, sell_through, stats::Latency, Attempt, Driver, Outcome, WaitEnd,
    WaitlistPolicy, Waitlisted,
};
use paysaga_e2e::StackOptions;
use paysaga_supervisor::ServiceKind;

use crate::{
    error::Result,
    invariants,
    scenario::drop::PRICE,
    scenario::{setup, started},
    Bench,
};

pub const SCENARIO: &str = "7 sell-through";
/// Buyers per unit.
pub const BUYERS_PER_UNIT: u64 = 10;
/// `WAITLIST_OFFER_TTL_SECS` of the system: an offer nobody takes passes on quickly.
pub const OFFER_TTL_SECS: u64 = 10;
/// How often a waiting buyer near the head of the line reads its entry.
pub const POLL: Duration = Duration::from_millis(250);
/// The longest a buyer waits in line; buyers leave long before, once nothing is held.
pub const PATIENCE: Duration = Duration::from_secs(120);
/// Per-request timeout of the buyers.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Every eighth buyer holds half the price (refused a unit: their account cannot hold
/// it), the others twice it.
fn opening_balance(i: usize) -> i64 {
    if i % 8 == 7 {
        PRICE / 2
    } else {
        PRICE * 2
    }
}

/// Starts the system, plays the drop and records its figures and invariants.
pub async fn measure(bench: &mut Bench) -> Result<()> {
    let units = bench.settings.sell_through_units;
    let count =
        usize::try_from(units * BUYERS_PER_UNIT).map_err(|e| setup("sell-through buyers", e))?;
    let (stack, endpoints, admin) = started(
        StackOptions::new("bench-sell-through")
            .rust_log("warn")
            .env(
                ServiceKind::Order,
                "WAITLIST_OFFER_TTL_SECS",
                OFFER_TTL_SECS,
            )
            .env(ServiceKind::Gate, "RECOMPUTE_INTERVAL_MS", 1000),
    )
    .await?;
    let product = admin
        .create_product(
            "sell-through",
            PRICE,
            i64::try_from(units).unwrap_or(i64::MAX),
        )
        .await
        .map_err(|e| setup("sell-through product", format!("{e:#}")))?;
    let balances: Vec<i64> = (0..count).map(opening_balance).collect();
    let underfunded = balances.iter().filter(|b| **b < PRICE).count();
    let seeding = Instant::now();
    let buyers = admin
        .open_buyers(&format!("st-{}", bench.run_id), &balances, 3)
        .await
        .map_err(|e| setup("seeding sell-through buyers", format!("{e:#}")))?;
    eprintln!(
        "  setup: {count} buyers ({underfunded} underfunded) in {:.1}s",
        seeding.elapsed().as_secs_f64()
    );
    admin
        .wait_for_quota(product.id, product.units_total, Duration::from_secs(60))
        .await
        .map_err(|e| setup("gate quota", format!("{e:#}")))?;
    let pool = stack.admin_pool().await;

    let driver = Driver::new(endpoints, REQUEST_TIMEOUT).with_waitlist(WaitlistPolicy {
        poll: POLL,
        wait_for: PATIENCE,
    });
    let start = Instant::now();
    let attempts = driver.run_drop(&buyers, product.id, 0, |_| {}).await;
    let elapsed = start.elapsed();
    let report = drop_invariants::settled(&pool, Duration::from_secs(120))
        .await
        .map_err(|e| setup("invariant checker", format!("{e:#}")))?;
    let st = sell_through::read(&pool, product.id)
        .await
        .map_err(|e| setup("reading the sell-through", format!("{e:#}")))?;

    let n = |f: &dyn Fn(&Attempt) -> bool| attempts.iter().filter(|a| f(a)).count() as f64;
    let refused = |code: &str| {
        n(&|a| {
            a.waitlist
                .as_ref()
                .is_some_and(|w| matches!(&w.end, WaitEnd::Refused { code: c } if c == code))
        })
    };
    let unanswered = n(&|a| !a.outcome.is_definite());
    // A count summed over the buyers who went to the waitlist.
    let in_line = |f: &dyn Fn(&Waitlisted) -> u32| -> f64 {
        attempts
            .iter()
            .filter_map(|a| a.waitlist.as_ref())
            .map(|w| f64::from(f(w)))
            .sum()
    };
    let r = &mut bench.report;
    let fig = |r: &mut crate::report::Report, name: &str, v: f64, unit: &str| {
        r.figure(SCENARIO, name, v, unit);
    };
    fig(r, "units on sale", st.units_total as f64, "units");
    fig(r, "buyers arriving at once", count as f64, "buyers");
    fig(r, "buyers who cannot pay", underfunded as f64, "buyers");
    fig(
        r,
        "  refused a unit (INSUFFICIENT_FUNDS: nothing held)",
        n(
            &|a| matches!(&a.outcome, Outcome::Rejected { code, .. } if code == "INSUFFICIENT_FUNDS"),
        ),
        "buyers",
    );
    fig(r, "units sold", st.units_sold as f64, "units");
    fig(
        r,
        "units sold through the waitlist",
        st.sold_via_waitlist as f64,
        "units",
    );
    fig(
        r,
        "units unsold at the end (on sale + on offer)",
        st.units_unsold() as f64,
        "units",
    );
    fig(
        r,
        "units left unsold while waiters went without (PostgreSQL)",
        report.unsold_while_waiters_went_without as f64,
        "units",
    );
    fig(
        r,
        "units to a buyer behind a waiter who went without (PostgreSQL)",
        report.units_to_later_arrivals as f64,
        "units",
    );
    fig(
        r,
        "buyers who joined the waitlist",
        st.entries as f64,
        "buyers",
    );
    fig(
        r,
        "joins refused NOT_SOLD_OUT (units on sale: back to the sale)",
        refused(paysaga_contracts::order::api::codes::NOT_SOLD_OUT),
        "buyers",
    );
    fig(
        r,
        "left the line once every unit was paid for",
        n(&|a| {
            a.waitlist
                .as_ref()
                .is_some_and(|w| w.end == WaitEnd::NothingHeld)
        }),
        "buyers",
    );
    fig(
        r,
        "told SOLD_OUT while units were on sale (buyer went back to the sale)",
        in_line(&|w| w.on_sale_seen),
        "times",
    );
    fig(
        r,
        "joins refused NOT_SOLD_OUT (buyer went back to the sale)",
        in_line(&|w| w.not_sold_out),
        "answers",
    );
    fig(r, "offers made", st.offers_made as f64, "offers");
    fig(r, "offers taken", st.offers_taken as f64, "offers");
    fig(r, "offers expired", st.offers_expired as f64, "offers");
    fig(
        r,
        "offers given up (RELEASED)",
        st.offers_released as f64,
        "offers",
    );
    fig(r, "payments FAILED", st.payments_failed as f64, "payments");
    fig(
        r,
        "  of them on a taken offer",
        n(&|a| matches!(a.outcome, Outcome::Failed { .. }) && a.took_offer()),
        "payments",
    );
    let ms = |us: u64| us as f64 / 1_000.0;
    let times = |r: &mut crate::report::Report, what: &str, l: &Latency| {
        for (q, v) in [("p50", l.p50_us), ("p95", l.p95_us), ("max", l.max_us)] {
            r.figure(SCENARIO, &format!("{what}: {q}"), ms(v), "ms");
        }
    };
    fig(
        r,
        "units back from failed payments",
        st.returns as f64,
        "units",
    );
    fig(
        r,
        "  next taken from a waitlist offer",
        st.returns_next_via_offer as f64,
        "units",
    );
    fig(
        r,
        "  next reserved on sale (nobody waiting yet)",
        st.returns_next_on_sale as f64,
        "units",
    );
    times(
        r,
        "unit's return to the next buyer's COMPLETED",
        &st.return_to_completed,
    );
    times(
        r,
        "unit's return to the next buyer's COMPLETED, through an offer",
        &st.return_to_completed_via_offer,
    );
    let paid: Vec<Duration> = attempts
        .iter()
        .filter(|a| a.outcome == Outcome::Completed)
        .map(|a| a.time_to_answer)
        .collect();
    times(
        r,
        "buyer's time to COMPLETED",
        &Latency::of_durations(&paid),
    );
    fig(
        r,
        "every buyer answered by",
        elapsed.as_secs_f64(),
        "s after the start",
    );
    fig(
        r,
        "waitlist entry reads",
        attempts
            .iter()
            .filter_map(|a| a.waitlist.as_ref())
            .map(|w| f64::from(w.polls))
            .sum(),
        "GETs",
    );

    r.invariant(
        SCENARIO,
        "units sold = units on sale",
        st.units_sold == st.units_total && st.units_unsold() == 0 && st.units_reserved == 0,
        format!(
            "{} of {} sold ({} through the waitlist); {} on sale, {} on offer, {} reserved at the end",
            st.units_sold,
            st.units_total,
            st.sold_via_waitlist,
            st.units_available,
            st.units_offered,
            st.units_reserved
        ),
    );
    r.invariant(
        SCENARIO,
        "every buyer a definite answer",
        unanswered == 0.0 && st.entries_waiting == 0,
        format!(
            "{unanswered} without one; {} still WAITING in PostgreSQL",
            st.entries_waiting
        ),
    );
    r.invariant(
        SCENARIO,
        "every offer ended (taken, expired or released)",
        st.offers_live == 0
            && st.offers_made == st.offers_taken + st.offers_expired + st.offers_released,
        format!(
            "{} made: {} taken, {} expired, {} released, {} live",
            st.offers_made, st.offers_taken, st.offers_expired, st.offers_released, st.offers_live
        ),
    );
    let completed = n(&|a| a.outcome == Outcome::Completed) as u64;
    invariants::check_drop(
        &mut bench.report,
        SCENARIO,
        &pool,
        product.id,
        units,
        completed,
    )
    .await?;
    invariants::check_system(&mut bench.report, SCENARIO, &pool).await?;
    eprintln!(
        "  sell-through: {} of {} sold ({} through the waitlist), {} offers made, {} payments FAILED, return to COMPLETED p50 {:.0} ms / max {:.0} ms, every answer in {:.1}s; invariants {}",
        st.units_sold,
        st.units_total,
        st.sold_via_waitlist,
        st.offers_made,
        st.payments_failed,
        ms(st.return_to_completed.p50_us),
        ms(st.return_to_completed.max_us),
        elapsed.as_secs_f64(),
        if report.holds() { "hold" } else { "VIOLATED" }
    );
    pool.close().await;
    drop(stack);
    Ok(())
}
