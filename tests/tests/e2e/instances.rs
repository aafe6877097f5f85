//! Two instances of every service behind a real HAProxy, one instance of each SIGKILLed
//! in the middle of a drop: the survivors carry the drop (HAProxy retries what the dead
//! ones refused or dropped), every payment ends terminal within the recovery bound, the
//! invariants hold, and one Idempotency-Key (or pass) sent to both instances directly
//! gets one answer.

use std::time::{Duration, Instant};

use paysaga_e2e::{
    haproxy, invariants, stats::Latency, Driver, DropRun, Endpoints, ServiceKind, Stack,
    StackOptions, Stop,
};

const UNITS: i64 = 40;
const BUYERS: usize = 300;
const PRICE: i64 = 7_500;
/// The fault suite's recovery bound for its fast runs (docs/faults.md).
const RECOVERY_BOUND: Duration = Duration::from_secs(90);

/// Instance `index` of every service, reached directly (bypassing HAProxy).
fn direct(stack: &Stack, index: usize) -> Endpoints {
    let url = |k| {
        stack
            .services
            .instance(k, index)
            .map(|p| p.url())
            .expect("two instances")
    };
    Endpoints {
        member: url(ServiceKind::Member),
        gate: url(ServiceKind::Gate),
        order: url(ServiceKind::Order),
        account: url(ServiceKind::Account),
        orchestrator: url(ServiceKind::Orchestrator),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_each_one_of_each_killed_mid_drop() -> anyhow::Result<()> {
    if haproxy::find().is_none() {
        eprintln!("skipped: {}", haproxy::INSTALL_HINT);
        return Ok(());
    }
    let mut stack = Stack::start(
        StackOptions::new("instances")
            .instances(2)
            // Ten service processes on one PostgreSQL shared with other test runs.
            .env_all("DB_MAX_CONNECTIONS", 6)
            .quick_takeover(),
    )
    .await?;
    let lb = stack
        .haproxy
        .as_ref()
        .expect("two instances run behind HAProxy");
    eprintln!(
        "haproxy pid {:?}, config {}",
        lb.pid(),
        lb.config_path().display()
    );
    let balances: Vec<i64> = (0..BUYERS)
        .map(|i| if i % 4 == 3 { PRICE / 2 } else { PRICE })
        .collect();
    let run = DropRun::open(&stack, "instances", PRICE, UNITS, &balances, 16).await?;
    let buyers = &run.buyers;

    // 64 buyers at a time (ten service processes share the machine); the kills land
    // once payments are running, whatever the clock says.
    let driver = Driver::new(run.endpoints.clone(), Duration::from_secs(5));
    let drop = run.start(&driver, run.buyers.clone(), 64);
    let in_flight = run.payments_in_flight(3, Duration::from_secs(60)).await?;
    let errors_before = driver.errors.times().len();
    let killed_at = Instant::now();
    for kind in ServiceKind::ALL.iter().rev() {
        stack.services.stop_instance(*kind, 0, Stop::Kill).await?;
    }
    eprintln!(
        "killed instance 0 of every service with {in_flight} payments in flight ({errors_before} errors before)"
    );

    // The survivors carry the rest of the drop; the dead instances stay down until it ends.
    let attempts = drop.await?;
    let drop_ended = killed_at.elapsed();
    let report = run.settled(RECOVERY_BOUND, &stack.log_paths()).await?;
    let settled_after = killed_at.elapsed();
    let errors = driver.errors.times();
    let after_kills: Vec<Instant> = errors.iter().copied().filter(|t| *t >= killed_at).collect();
    let recovery = after_kills
        .last()
        .map(|t| t.duration_since(killed_at))
        .unwrap_or_default();
    eprintln!(
        "recovery: {:.2}s from the kills until the drop's last error ({} errors after the kills, {} before); drop ended {:.2}s and every payment was terminal {:.2}s after the kills",
        recovery.as_secs_f64(),
        after_kills.len(),
        errors_before,
        drop_ended.as_secs_f64(),
        settled_after.as_secs_f64()
    );
    for kind in ServiceKind::ALL {
        let survivor = stack.services.instance(kind, 1).expect("two instances");
        assert_eq!(survivor.starts(), 1, "{kind}-1 never died");
    }
    stack.services.check_alive()?;

    // Every buyer got a definite answer, and it is the right one for their money.
    let answers = run.answers(&attempts, &stack.log_paths());
    assert_eq!(answers.completed, report.payments_completed);
    let latency = Latency::of_durations(attempts.iter().map(|a| &a.time_to_answer));
    // The fault report's row (docs/faults.md, "Several instances").
    eprintln!(
        "| two instances per service, one of each SIGKILLed | {} | {} / {} / {} | 5 | payments unfinished at the kills = {in_flight} | {} | {} | {:.1} | {:.2} / {:.2} | {} | {} | {} | {} |",
        report.payments,
        report.payments_completed,
        report.payments_failed,
        report.payments_refunded,
        report.violations().len(),
        report.payments_needing_attention,
        recovery.as_secs_f64(),
        latency.p50().as_secs_f64(),
        latency.max().as_secs_f64(),
        report.oversold_units,
        report.payments_bad_net,
        report.balance_drift,
        report.operation_keys_applied_twice,
    );

    // The killed instances come back; then one pass and one Idempotency-Key go to both
    // instances directly, bypassing HAProxy.
    for kind in ServiceKind::ALL {
        stack.services.start_instance(kind, 0).await?;
    }
    let buyer = buyers
        .iter()
        .find(|b| {
            b.balance >= PRICE
                && attempts
                    .iter()
                    .any(|a| a.member == b.member && a.outcome.is_sold_out())
        })
        .expect("a funded buyer was sold out");
    let second = run
        .admin
        .create_product("instances-after", PRICE, 2)
        .await?;
    run.admin
        .wait_for_quota(second.id, 2, Duration::from_secs(30))
        .await?;
    let one = Driver::new(direct(&stack, 0), Duration::from_secs(10));
    let two = Driver::new(direct(&stack, 1), Duration::from_secs(10));
    let mut retries = 0;
    let pass = one.pass(buyer, second.id, &mut retries).await?;
    let r1 = one
        .reserve(buyer, second.id, &pass.pass, &mut retries)
        .await?;
    let r2 = two
        .reserve(buyer, second.id, &pass.pass, &mut retries)
        .await?;
    assert_eq!(r1.id, r2.id, "one pass, one reservation on both instances");

    let key = format!("instances-{}", uuid::Uuid::new_v4());
    let first = one.pay(buyer, r1.id, &key, &mut retries).await?;
    let followed = one
        .follow(buyer, first.clone())
        .await
        .map_err(|(p, e)| anyhow::anyhow!("payment {} not terminal: {e}", p.id))?;
    let a1 = one.post_payment(buyer, r1.id, &key).await?;
    let a2 = two.post_payment(buyer, r1.id, &key).await?;
    assert_eq!(a1.payment.id, first.id);
    assert_eq!(
        (a2.status, a2.payment.id, &a2.payment.state, a2.replayed),
        (a1.status, a1.payment.id, &a1.payment.state, a1.replayed),
        "the same Idempotency-Key gets the same answer from both instances"
    );
    assert!(
        a2.replayed,
        "the second instance replays the first's answer"
    );
    assert_eq!(a2.payment.state, followed.state);
    let rows: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM payment_service.payments WHERE reservation_id = $1"#,
    )
    .bind(r1.id)
    .fetch_one(&run.pool)
    .await?;
    assert_eq!(rows, 1, "one payment for the key in PostgreSQL");
    let reservations: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM order_service.reservations WHERE product_id = $1"#,
    )
    .bind(second.id)
    .fetch_one(&run.pool)
    .await?;
    assert_eq!(
        reservations, 1,
        "one reservation for the pass in PostgreSQL"
    );

    let last = invariants::settled(&run.pool, RECOVERY_BOUND).await?;
    last.assert_holds();
    assert_eq!(last.balance_total, run.deposits);
    eprintln!(
        "direct to both instances: key {key} -> payment {} {} (status {}, replayed on the second), pass -> reservation {}",
        a2.payment.id, a2.payment.state, a2.status, r2.id
    );
    Ok(())
}
