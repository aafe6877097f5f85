//! A bot attack on a members' drop through the real processes: bots that may not buy
//! (unfunded, or made after the announcement) take passes and try to reserve, fast and
//! again, while eligible buyers race for the units; the eligible buyers get every unit
//! and the bots none, read from PostgreSQL. Bots signing up from ten addresses are held
//! to the member service's own limits, each refusal a 429 with Retry-After.

use std::{
    sync::{atomic::AtomicBool, Arc},
    time::Duration,
};

use paysaga_e2e::{
    bots::{self, Bots},
    invariants, Driver, Outcome, Stack, StackOptions, WaitlistPolicy,
};

const PRICE: i64 = 2_500;
const UNITS: i64 = 20;
const BUYERS: usize = 200;
const BOTS: usize = 100;
const ADDRESSES: usize = 10;
/// Sign-ups per address in the flood, twice the member service's limit per address.
const FLOOD_PER_ADDRESS: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bots_get_no_unit_and_eligible_buyers_get_every_one() -> anyhow::Result<()> {
    let limits = member::config::SignUpLimits::default();
    let stack = Stack::start(
        StackOptions::new("bots")
            .quick_loops()
            // The test plays the trusted proxy in front of the member service.
            .member_behind_local_proxy(limits.per_address, limits.total),
    )
    .await?;
    let (endpoints, admin) = stack.operator();
    let buyers = admin
        .open_buyers("bots-buyer", &[PRICE * 2; BUYERS], 4)
        .await?;
    let bots = Bots::seed(&admin, "bots-bot", BOTS, PRICE * 2).await?;
    let product = bots.product(&admin, "bots-drop", PRICE, UNITS).await?;
    admin
        .wait_for_quota(product.id, UNITS, Duration::from_secs(30))
        .await?;
    let pool = stack.admin_pool().await;

    // Buyers told SOLD_OUT wait in line: a unit a bot's pass kept from them while the
    // bot could not pay comes to the line once the gate no longer promises it.
    let driver =
        Driver::new(endpoints.clone(), Duration::from_secs(10)).with_waitlist(WaitlistPolicy {
            poll: Duration::from_millis(200),
            wait_for: Duration::from_secs(30),
        });
    let stop = Arc::new(AtomicBool::new(false));
    let attack = {
        let (driver, all, stop) = (driver.clone(), bots.all(), stop.clone());
        tokio::spawn(async move {
            bots::run_bots(&driver, &all, product.id, Duration::from_millis(20), stop).await
        })
    };
    // Scripts are there the moment the drop opens; people a moment later.
    tokio::time::sleep(bots::HEAD_START).await;
    let attempts = driver.run_drop(&buyers, product.id, 0, |_| {}).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let tally = attack.await?;

    let report = invariants::settled(&pool, Duration::from_secs(60)).await?;
    report.assert_holds();
    let bot_members = bots.members();
    let got = bots::holdings(&pool, product.id, &bot_members).await?;
    assert_eq!(
        (got.reservations, got.bought, got.holds),
        (0, 0, 0),
        "bots held or bought units: {tally:#?}"
    );
    assert_eq!(tally.reservations, 0, "{tally:#?}");
    let eligible: Vec<String> = buyers.iter().map(|b| b.member.clone()).collect();
    let sold = bots::holdings(&pool, product.id, &eligible).await?;
    assert_eq!(sold.bought, UNITS, "every unit to an eligible buyer");
    assert_eq!(
        (report.units_sold, report.units_total),
        (UNITS, UNITS),
        "{report:#?}"
    );
    let completed = attempts
        .iter()
        .filter(|a| a.outcome == Outcome::Completed)
        .count();
    assert_eq!(completed, UNITS as usize);
    assert!(
        attempts
            .iter()
            .all(|a| a.outcome == Outcome::Completed || a.outcome.is_sold_out()),
        "an eligible buyer got another answer: {:?}",
        attempts
            .iter()
            .find(|a| a.outcome != Outcome::Completed && !a.outcome.is_sold_out())
    );
    // Both kinds of bots were turned away where they should be, and tried more than once.
    let told = |k: &str| tally.answers.get(k).copied().unwrap_or(0);
    assert!(
        told("pass 403 ACCOUNT_TOO_NEW") >= (BOTS / 2) as u64,
        "{tally:#?}"
    );
    assert!(
        told("reserve 422 INSUFFICIENT_FUNDS") >= 1,
        "unfunded bots never reached a reservation: {tally:#?}"
    );
    assert!(tally.requests > BOTS as u64, "{tally:#?}");

    // Bots sign up from ten addresses, each bot once: the limit per address lets five
    // through from each, the rest are refused with a time to come back.
    // Sign-ups wait their turn for Argon2 (as many at once as the service has cores):
    // a client that gave up on one would cut it short after it was counted.
    let patient = paysaga_common::client::http_client(Duration::from_secs(120));
    let stop = Arc::new(AtomicBool::new(true));
    let flood = bots::sign_up_flood(
        &patient,
        &endpoints.member,
        "bots-flood",
        ADDRESSES,
        FLOOD_PER_ADDRESS,
        Duration::ZERO,
        stop,
    )
    .await;
    // Each bot got one final answer: a 201, or a 429 with its time to come back. A
    // request whose answer was lost may have made its account, and its bot then hears
    // 429: PostgreSQL counts the accounts.
    let admitted = i64::from(limits.per_address) * ADDRESSES as i64;
    let asked = (ADDRESSES * FLOOD_PER_ADDRESS) as u64;
    assert_eq!(flood.created + flood.refused, asked, "{flood:#?}");
    assert_eq!(flood.refused, flood.refused_with_retry_after, "{flood:#?}");
    assert!(flood.other.is_empty(), "{flood:#?}");
    let flooders = bots::flood_accounts(&pool, "bots-flood").await?;
    assert_eq!(flooders, admitted, "{flood:#?}");
    assert!(flood.created as i64 <= flooders, "{flood:#?}");

    // Members still sign in, from their own addresses.
    let names: Vec<String> = (0..20).map(|i| format!("bots-buyer-{i}")).collect();
    let signed_in = bots::sign_ins(&patient, &endpoints.member, &names, 4).await;
    assert_eq!(signed_in.ok, 20, "{signed_in:#?}");
    Ok(())
}
