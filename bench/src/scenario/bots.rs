//! Part 8, a bot attack, measured: scripted bot accounts (half unfunded, half made after
//! the drop's announcement) from ten client addresses take passes and try to reserve,
//! again every few tens of milliseconds, while eligible funded buyers race for the units
//! of a drop that admits only accounts made before its announcement. Reported: units
//! the bots held or bought and units sold to eligible buyers (from PostgreSQL), the
//! eligible buyers' time to an answer in the same drop without bots and with them,
//! members' sign-in times alone and while bots flood the sign-up from the same ten
//! addresses (the member service's own sign-up limits on), what the bots were told, and
//! every invariant.
//!
//! On a system of its own, started by the e2e harness with the member service's default
//! sign-up limits and the benchmark as its trusted proxy, each request carrying its
//! client's address in `X-Forwarded-For`. The accounts of the race are seeded in bulk
//! beforehand (`paysaga_drop::bots::Bots::seed`); the flood shows what the front door
//! does with bots signing up one by one.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use paysaga_drop::{
    bots::{self, Bots},
    invariants as drop_invariants, sell_through,
    setup::Admin,
    stats::Latency,
    Attempt, Buyer, Driver, Outcome, WaitlistPolicy,
};
use paysaga_e2e::StackOptions;
use paysaga_supervisor::ServiceKind;

use crate::{
    cpu,
    error::Result,
    invariants,
    report::Report,
    scenario::drop::PRICE,
    scenario::{setup, started},
    system::{stack_pids, with_service_env},
    Bench,
};

pub const SCENARIO: &str = "8 bot attack";
/// Client addresses the bots come from.
pub const ADDRESSES: usize = 10;
/// A bot's pause between two tries (±25 %).
pub const BOT_PAUSE: Duration = Duration::from_millis(50);
/// A flooding bot's pause after a refused sign-up (it ignores Retry-After).
pub const FLOOD_PAUSE: Duration = Duration::from_millis(100);
/// Members signing in at once, alone and during the flood.
const SIGN_IN_CLIENTS: usize = 8;
/// Per-request timeout of buyers and bots.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The size of the attack.
#[derive(Debug, Clone, Copy)]
struct Size {
    units: i64,
    buyers: usize,
    bots: usize,
    /// Members who sign in, in each of the two sign-in phases.
    sign_ins: usize,
}

impl Size {
    fn of(quick: bool) -> Self {
        if quick {
            Self {
                units: 20,
                buyers: 200,
                bots: 100,
                sign_ins: 50,
            }
        } else {
            Self {
                units: 100,
                buyers: 2_000,
                bots: 1_000,
                sign_ins: 200,
            }
        }
    }
}

/// A set of eligible buyers, by name.
struct Crowd {
    prefix: String,
    buyers: Vec<Buyer>,
}

impl Crowd {
    async fn open(admin: &Admin, prefix: String, count: usize) -> Result<Self> {
        let buyers = admin
            .open_buyers(&prefix, &vec![PRICE * 2; count], 4)
            .await
            .map_err(|e| setup("seeding eligible buyers", format!("{e:#}")))?;
        Ok(Self { prefix, buyers })
    }

    /// The first `n` signing in at `member_url`, [`SIGN_IN_CLIENTS`] at a time.
    async fn sign_ins(&self, http: &reqwest::Client, member_url: &str, n: usize) -> bots::SignIns {
        let names: Vec<String> = (0..n.min(self.buyers.len()))
            .map(|i| format!("{}-{i}", self.prefix))
            .collect();
        bots::sign_ins(http, member_url, &names, SIGN_IN_CLIENTS).await
    }

    fn members(&self) -> Vec<String> {
        self.buyers.iter().map(|b| b.member.clone()).collect()
    }
}

/// One drop of the members' kind: the product, its buyers' attempts, how long it took
/// and the CPU it cost, by process.
struct Played {
    product: i64,
    attempts: Vec<Attempt>,
    answers: Latency,
    /// From the buyers' start to the last buyer's answer.
    took: Duration,
    cpu: cpu::CpuUse,
}

impl Played {
    fn completed(&self) -> u64 {
        self.attempts
            .iter()
            .filter(|a| a.outcome == Outcome::Completed)
            .count() as u64
    }
}

/// Plays a drop of `units` for `crowd` (all at once), with `bots` trying meanwhile;
/// `pids` are the services' processes, whose CPU is measured over the drop.
#[allow(clippy::too_many_arguments)]
async fn play(
    admin: &Admin,
    driver: &Driver,
    pids: &[(String, u32)],
    announced: &Bots,
    name: &str,
    units: i64,
    crowd: &Crowd,
    bots: &[Buyer],
) -> Result<(Played, bots::BotTally)> {
    let product = announced
        .product(admin, name, PRICE, units)
        .await
        .map_err(|e| setup("the drop's product", format!("{e:#}")))?;
    admin
        .wait_for_quota(product.id, units, Duration::from_secs(60))
        .await
        .map_err(|e| setup("gate quota", format!("{e:#}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_before = cpu::snapshot(pids);
    let start = Instant::now();
    let attack = {
        let (driver, bots, stop) = (driver.clone(), bots.to_vec(), stop.clone());
        tokio::spawn(
            async move { bots::run_bots(&driver, &bots, product.id, BOT_PAUSE, stop).await },
        )
    };
    let attempts = driver.run_drop(&crowd.buyers, product.id, 0, |_| {}).await;
    stop.store(true, Ordering::Relaxed);
    let tally = attack.await.map_err(|e| setup("the bots", e))?;
    let took = start.elapsed();
    let cpu = cpu::between(&cpu_before, &cpu::snapshot(pids));
    let answers: Vec<Duration> = attempts.iter().map(|a| a.time_to_answer).collect();
    Ok((
        Played {
            product: product.id,
            answers: Latency::of_durations(&answers),
            attempts,
            took,
            cpu,
        },
        tally,
    ))
}

/// Starts the system, plays the drops and the flood, and records figures and invariants.
pub async fn measure(bench: &mut Bench) -> Result<()> {
    let size = Size::of(bench.settings.quick);
    let limits = member::config::SignUpLimits::default();
    let (stack, endpoints, admin) = started(with_service_env(
        StackOptions::new("bench-bots")
            .rust_log("warn")
            .env(ServiceKind::Gate, "RECOMPUTE_INTERVAL_MS", 1000)
            // The benchmark is the proxy in front of the member service.
            .member_behind_local_proxy(limits.per_address, limits.total),
    )?)
    .await?;
    let run = &bench.run_id;
    let seeding = Instant::now();
    let warm = Crowd::open(&admin, format!("bw-{run}"), bench.settings.concurrency).await?;
    let alone = Crowd::open(&admin, format!("ba-{run}"), size.buyers).await?;
    let raced = Crowd::open(&admin, format!("br-{run}"), size.buyers).await?;
    let bots = Bots::seed(&admin, &format!("bb-{run}"), size.bots, PRICE * 2)
        .await
        .map_err(|e| setup("seeding the bots", format!("{e:#}")))?;
    eprintln!(
        "  setup: {} eligible buyers per drop, {} bots ({} unfunded, {} made after the announcement) in {:.1}s",
        size.buyers,
        size.bots,
        bots.unfunded.len(),
        bots.too_new.len(),
        seeding.elapsed().as_secs_f64()
    );
    let pool = stack.admin_pool().await;
    // Buyers told SOLD_OUT wait in line, as the sell-through part's: a unit an unfunded
    // bot's pass kept from them comes to the line once the gate no longer promises it.
    let driver = Driver::new(endpoints.clone(), REQUEST_TIMEOUT).with_waitlist(WaitlistPolicy {
        poll: Duration::from_millis(250),
        wait_for: Duration::from_secs(120),
    });

    // A drop that opens every connection, then the same drop without bots and with them.
    let pids = stack_pids(&stack);
    play(
        &admin,
        &driver,
        &pids,
        &bots,
        "bots warm-up",
        10,
        &warm,
        &[],
    )
    .await?;
    let (without, _) = play(
        &admin,
        &driver,
        &pids,
        &bots,
        "bots: no bots",
        size.units,
        &alone,
        &[],
    )
    .await?;
    let all_bots = bots.all();
    let (with, tally) = play(
        &admin,
        &driver,
        &pids,
        &bots,
        "bots: attacked",
        size.units,
        &raced,
        &all_bots,
    )
    .await?;

    // Sign-ups and sign-ins wait their turn for Argon2: a client that gave up on one
    // would cut it short after the limits counted it.
    let patient = paysaga_common::client::http_client(Duration::from_secs(120));
    // Sign-ins alone, then the same number of other members signing in while bots
    // sign up from the ten addresses, each bot once and again after every refusal.
    let signing_alone = alone
        .sign_ins(&patient, &endpoints.member, size.sign_ins)
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = Instant::now();
    let flood = {
        let (http, url, stop) = (patient.clone(), endpoints.member.clone(), stop.clone());
        let prefix = format!("bf-{run}");
        let per_address = size.bots / ADDRESSES;
        tokio::spawn(async move {
            bots::sign_up_flood(
                &http,
                &url,
                &prefix,
                ADDRESSES,
                per_address,
                FLOOD_PAUSE,
                stop,
            )
            .await
        })
    };
    // The flood's first wave is in flight before the members come.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let signing_flooded = raced
        .sign_ins(&patient, &endpoints.member, size.sign_ins)
        .await;
    stop.store(true, Ordering::Relaxed);
    let flood = flood.await.map_err(|e| setup("the sign-up flood", e))?;
    let flood_accounts = bots::flood_accounts(&pool, &format!("bf-{run}"))
        .await
        .map_err(|e| setup("the flood's accounts", format!("{e:#}")))?;
    // Each address's window admits `per_address` sign-ups; a flood outlasting one
    // window meets a fresh one.
    let windows = 1 + flooding.elapsed().as_secs() / limits.address_window.as_secs().max(1);
    let admissible = u64::from(limits.per_address) * ADDRESSES as u64 * windows;

    let settled = drop_invariants::settled(&pool, Duration::from_secs(120))
        .await
        .map_err(|e| setup("invariant checker", format!("{e:#}")))?;
    let got = bots::holdings(&pool, with.product, &bots.members())
        .await
        .map_err(|e| setup("reading the bots' units", format!("{e:#}")))?;
    let sold = bots::holdings(&pool, with.product, &raced.members())
        .await
        .map_err(|e| setup("reading the buyers' units", format!("{e:#}")))?;

    let mut through_line = Vec::new();
    for played in [&without, &with] {
        let st = sell_through::read(&pool, played.product)
            .await
            .map_err(|e| setup("reading the drops", format!("{e:#}")))?;
        through_line.push(st.sold_via_waitlist);
    }

    let r = &mut bench.report;
    let fig = |r: &mut Report, name: &str, v: f64, unit: &str| r.figure(SCENARIO, name, v, unit);
    let ms = |us: u64| us as f64 / 1_000.0;
    fig(r, "units on sale", size.units as f64, "units");
    fig(
        r,
        "eligible funded buyers racing",
        size.buyers as f64,
        "buyers",
    );
    fig(
        r,
        "bots racing, from client addresses",
        size.bots as f64,
        &format!("bots from {ADDRESSES} addresses"),
    );
    fig(
        r,
        "  unfunded (made before the announcement)",
        bots.unfunded.len() as f64,
        "bots",
    );
    fig(
        r,
        "  made after the announcement (funded)",
        bots.too_new.len() as f64,
        "bots",
    );
    fig(
        r,
        "units held or bought by bots (goal 0)",
        (got.reservations + got.bought) as f64,
        "units",
    );
    fig(r, "holds placed on bot accounts", got.holds as f64, "holds");
    fig(
        r,
        "units sold to eligible buyers",
        sold.bought as f64,
        &format!("of {}", size.units),
    );
    fig(
        r,
        "units sold through the waitlist, no bots",
        through_line[0] as f64,
        "units",
    );
    fig(
        r,
        "units sold through the waitlist, with bots",
        through_line[1] as f64,
        "units",
    );
    fig(
        r,
        "units left unsold while waiters went without (PostgreSQL)",
        settled.unsold_while_waiters_went_without as f64,
        "units",
    );
    fig(
        r,
        "units to a buyer behind a waiter who went without (PostgreSQL)",
        settled.units_to_later_arrivals as f64,
        "units",
    );
    fig(
        r,
        "bot requests (pass + reservation)",
        tally.requests as f64,
        "requests",
    );
    fig(r, "passes granted to bots", tally.passes as f64, "passes");
    for (answer, n) in &tally.answers {
        fig(r, &format!("  bots told: {answer}"), *n as f64, "answers");
    }
    for (what, l) in [
        (
            "eligible buyers' time to an answer, no bots",
            &without.answers,
        ),
        (
            "eligible buyers' time to an answer, with bots",
            &with.answers,
        ),
    ] {
        for (q, v) in [("p50", l.p50_us), ("p95", l.p95_us), ("max", l.max_us)] {
            fig(r, &format!("{what}: {q}"), ms(v), "ms");
        }
    }
    // Where each drop's CPU went: the bots' cost to the buyers is the CPU they take
    // from the same two cores.
    for (label, played) in [("no bots", &without), ("with bots", &with)] {
        fig(
            r,
            &format!("drop length ({label}): last buyer's answer"),
            played.took.as_secs_f64() * 1_000.0,
            "ms",
        );
        let c = &played.cpu;
        let mut by: Vec<(String, f64)> = c.by_process.clone();
        by.push(("PostgreSQL (all backends)".into(), c.postgres_s));
        by.push(("the benchmark (buyers and bots)".into(), c.bench_s));
        by.push(("everything else on the machine".into(), c.others_s));
        by.push(("whole machine".into(), c.machine_s));
        for (name, s) in by {
            fig(r, &format!("CPU in the drop ({label}): {name}"), s, "s");
        }
    }
    let slowdown = with.answers.p95_us as f64 / without.answers.p95_us.max(1) as f64;
    fig(
        r,
        "eligible buyers' p95 with bots ÷ without (goal ≤ 1.2)",
        slowdown,
        "×",
    );
    fig(
        r,
        "bot sign-ups (flood)",
        flood.bots as f64,
        &format!("bots from {ADDRESSES} addresses"),
    );
    fig(r, "  sign-up requests", flood.attempts as f64, "requests");
    fig(
        r,
        "  requests without an answer (sent again)",
        flood.lost as f64,
        "requests",
    );
    fig(
        r,
        "  accounts made (answered 201)",
        flood.created as f64,
        "accounts",
    );
    fig(
        r,
        "  accounts made (PostgreSQL)",
        flood_accounts as f64,
        "accounts",
    );
    fig(
        r,
        "  refused 429 TOO_MANY_SIGN_UPS",
        flood.refused as f64,
        "answers",
    );
    fig(
        r,
        "  of them with Retry-After",
        flood.refused_with_retry_after as f64,
        "answers",
    );
    for (answer, n) in &flood.other {
        fig(
            r,
            &format!("  other answers: {answer}"),
            *n as f64,
            "answers",
        );
    }
    fig(
        r,
        "members' sign-in requests without an answer (sent again)",
        (signing_alone.lost + signing_flooded.lost) as f64,
        "requests",
    );
    for (what, s) in [
        ("members' sign-in, alone", &signing_alone),
        (
            "members' sign-in, during the sign-up flood",
            &signing_flooded,
        ),
    ] {
        for (q, v) in [
            ("p50", s.latency.p50_us),
            ("p95", s.latency.p95_us),
            ("max", s.latency.max_us),
        ] {
            fig(r, &format!("{what}: {q}"), ms(v), "ms");
        }
    }

    r.invariant(
        SCENARIO,
        "bots held or bought 0 units",
        got == bots::Holdings::default() && tally.reservations == 0,
        format!(
            "{} reservations, {} bought, {} holds on bot accounts; {} reservations granted to bots",
            got.reservations, got.bought, got.holds, tally.reservations
        ),
    );
    r.invariant(
        SCENARIO,
        "every unit sold to an eligible buyer",
        sold.bought == size.units,
        format!("{} of {} units", sold.bought, size.units),
    );
    let unanswered = with
        .attempts
        .iter()
        .filter(|a| !a.outcome.is_definite())
        .count()
        + without
            .attempts
            .iter()
            .filter(|a| !a.outcome.is_definite())
            .count();
    r.invariant(
        SCENARIO,
        "every eligible buyer a definite answer",
        unanswered == 0,
        format!("{unanswered} without one"),
    );
    r.invariant(
        SCENARIO,
        "sign-ups past the limits refused with 429 and Retry-After",
        flood.refused == flood.refused_with_retry_after && flood_accounts as u64 <= admissible,
        format!(
            "{flood_accounts} made (at most {admissible} admissible), {} refused ({} with Retry-After), {} other",
            flood.refused,
            flood.refused_with_retry_after,
            flood.other.values().sum::<u64>()
        ),
    );
    r.invariant(
        SCENARIO,
        "members signed in during the flood",
        signing_flooded.ok == size.sign_ins as u64 && signing_alone.ok == size.sign_ins as u64,
        format!(
            "{} and {} sessions; other answers {:?} {:?}",
            signing_alone.ok, signing_flooded.ok, signing_alone.other, signing_flooded.other
        ),
    );
    for (label, played) in [("no bots", &without), ("with bots", &with)] {
        invariants::check_drop(
            r,
            &format!("{SCENARIO} ({label})"),
            &pool,
            played.product,
            size.units as u64,
            played.completed(),
        )
        .await?;
    }
    invariants::check_system(r, SCENARIO, &pool).await?;
    eprintln!(
        "  bots: {} units to bots, {} of {} to eligible buyers; p95 {:.1} ms without bots, {:.1} ms with ({slowdown:.2}×); flood: {flood_accounts} made, {} refused 429; sign-in p95 {:.1} ms alone, {:.1} ms flooded; invariants {}",
        got.reservations,
        sold.bought,
        size.units,
        ms(without.answers.p95_us),
        ms(with.answers.p95_us),
        flood.refused,
        ms(signing_alone.latency.p95_us),
        ms(signing_flooded.latency.p95_us),
        if settled.holds() { "hold" } else { "VIOLATED" }
    );
    pool.close().await;
    drop(stack);
    Ok(())
}
