//! The order process killed with SIGKILL while the sweep is expiring reservations of a
//! product people wait for: ending a reservation and offering its unit are one
//! transaction, so at the kill and after the restart no unit is on sale while someone
//! waits, no unit is lost, and every unit that came back went to the line in order.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use paysaga_contracts::order::api::WaitlistState;
use paysaga_e2e::{
    invariants, waitlist, Admin, Driver, Endpoints, ServiceKind, Stack, StackOptions, Stop,
};
use sqlx::{PgConnection, PgPool};

const UNITS: i64 = 120;
const WAITERS: usize = 150;

/// Units of the product per state: (AVAILABLE, RESERVED, OFFERED, SOLD).
async fn units(db: &mut PgConnection, product_id: i64) -> anyhow::Result<(i64, i64, i64, i64)> {
    let u = invariants::unit_states(db, product_id).await?;
    Ok((u.available, u.reserved, u.offered, u.sold))
}

async fn expired(db: &mut PgConnection) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM order_service.reservations WHERE state = 'EXPIRED'"#,
    )
    .fetch_one(db)
    .await?)
}

/// What must hold at any instant: every expired reservation's unit is offered to a
/// waiter (the line is longer than the stock), none is on sale, none is lost; offers
/// went to the first in line; the invariant checker agrees.
async fn check_handoffs(pool: &PgPool, product_id: i64, waiters: &[String]) -> anyhow::Result<i64> {
    // One snapshot for the counts below: the sweep keeps handing units over meanwhile.
    let mut snapshot = pool.begin().await?;
    sqlx::query(r#"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"#)
        .execute(&mut *snapshot)
        .await?;
    let done = expired(&mut snapshot).await?;
    let (available, reserved, offered, sold) = units(&mut snapshot, product_id).await?;
    assert_eq!(available, 0, "a unit on sale while {WAITERS} wait");
    assert_eq!(sold, 0);
    assert_eq!(reserved + offered, UNITS, "a unit lost");
    assert_eq!(
        offered, done,
        "every expired reservation's unit is on offer"
    );
    let mut to: Vec<String> = sqlx::query_scalar(
        r#"SELECT member_id FROM order_service.waitlist_offers WHERE product_id = $1 AND state = 'OFFERED'"#,
    )
    .bind(product_id)
    .fetch_all(&mut *snapshot)
    .await?;
    to.sort();
    let mut first: Vec<String> = waiters[..usize::try_from(done)?].to_vec();
    first.sort();
    assert_eq!(to, first, "offers go to the head of the line");
    let events: (i64, i64) = sqlx::query_as(
        r#"SELECT COUNT(*) FILTER (WHERE type = 'reservation.expired'), COUNT(*) FILTER (WHERE type = 'waitlist.offer_made')
           FROM order_service.outbox_events"#,
    )
    .fetch_one(&mut *snapshot)
    .await?;
    snapshot.commit().await?;
    assert_eq!(events, (done, done), "one event per expiry and per offer");
    let report = invariants::check(pool).await?;
    assert_eq!(
        (
            report.offered_units_without_one_live_offer,
            report.members_with_two_live_offers,
            report.available_while_waiting,
            report.offer_units_reserved_by_others,
            report.unit_state_mismatches,
        ),
        (0, 0, 0, 0, 0),
        "{report:#?}"
    );
    Ok(done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_killed_while_expiries_hand_units_to_the_waitlist() -> anyhow::Result<()> {
    // The sweep expires one reservation per transaction, as fast as it can, so the
    // kill lands among many committed and in-flight handoffs.
    let mut stack = Stack::start(
        StackOptions::new("waitlist-crash")
            .env(ServiceKind::Order, "SWEEP_INTERVAL_MS", 1000)
            .env(ServiceKind::Order, "SWEEP_BATCH", 1)
            .env(ServiceKind::Order, "SWEEP_MAX_BATCHES", 10_000)
            .quick_quota(),
    )
    .await?;
    let endpoints = Endpoints::from_wiring(stack.wiring());
    let http = paysaga_common::client::http_client(Duration::from_secs(10));
    let admin = Admin::new(endpoints.clone(), http.clone());
    let product = admin.create_product("waitlist-crash", 1_000, UNITS).await?;
    let holders = admin
        .open_buyers("wl-holder", &vec![10_000; UNITS as usize], 4)
        .await?;
    let waiters = admin
        .open_buyers("wl-waiter", &vec![10_000; WAITERS], 4)
        .await?;
    admin
        .wait_for_quota(product.id, UNITS, Duration::from_secs(30))
        .await?;
    let driver = Driver::new(endpoints.clone(), Duration::from_secs(10));
    futures::stream::iter(&holders)
        .map(|b| {
            let driver = &driver;
            async move {
                let mut retries = 0;
                let pass = waitlist::setup_pass(driver, b, product.id, &mut retries).await?;
                driver
                    .reserve(b, product.id, &pass.pass, &mut retries)
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;
    // The line, in join order.
    let line = waitlist::join_in_order(&http, &endpoints, &waiters, product.id).await?;

    let pool = stack.admin_pool().await;
    // Every reservation, and with it its hold, due at once.
    waitlist::make_due(&pool, None).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while expired(&mut *pool.acquire().await?).await? < 10 {
        assert!(Instant::now() < deadline, "the sweep never started");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    stack.stop(ServiceKind::Order, Stop::Kill).await?;
    let at_kill = check_handoffs(&pool, product.id, &line).await?;
    eprintln!("killed the order process after {at_kill} of {UNITS} expiries");
    assert!(
        at_kill < UNITS,
        "the kill came after the sweep had finished"
    );

    stack.start_service(ServiceKind::Order).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while expired(&mut *pool.acquire().await?).await? < UNITS {
        assert!(
            Instant::now() < deadline,
            "the sweep did not finish after the restart\n{}",
            stack.log_paths()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(check_handoffs(&pool, product.id, &line).await?, UNITS);
    // The rest still wait, in order.
    for (i, w) in waiters[UNITS as usize..].iter().enumerate() {
        assert_eq!(
            waitlist::place_of(&http, &endpoints, w, product.id).await?,
            (WaitlistState::Waiting, Some(i as i64 + 1))
        );
    }
    invariants::check(&pool).await?.assert_holds();
    Ok(())
}
