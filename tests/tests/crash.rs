//! The orchestrator process killed with SIGKILL in the middle of a drop and started
//! again: buyers retry with their Idempotency-Keys, recovery finishes what the dead
//! process left, every payment ends terminal and the invariants hold.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use paysaga_e2e::{
    invariants, Admin, Driver, Endpoints, Link, Outcome, ServiceKind, Stack, StackOptions, Stop,
};

const UNITS: i64 = 30;
const BUYERS: usize = 200;
const PRICE: i64 = 7_500;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orchestrator_killed_mid_drop_and_restarted() -> anyhow::Result<()> {
    let mut stack = Stack::start(
        StackOptions::new("crash")
            .env(ServiceKind::Gate, "RECOMPUTE_INTERVAL_MS", 1000)
            .env(ServiceKind::Orchestrator, "RECOVERY_INTERVAL_MS", 1000)
            .env(ServiceKind::Orchestrator, "DOWNSTREAM_TIMEOUT_MS", 2000)
            .env(ServiceKind::Orchestrator, "LEASE_MS", 6000)
            .proxy(Link::OrchestratorToAccount),
    )
    .await?;
    let endpoints = Endpoints::from_wiring(stack.wiring());
    let admin = Admin::new(
        endpoints.clone(),
        paysaga_common::client::http_client(Duration::from_secs(10)),
    );
    let product = admin.create_product("crash-drop", PRICE, UNITS).await?;
    let balances: Vec<i64> = (0..BUYERS)
        .map(|i| if i % 4 == 3 { PRICE / 2 } else { PRICE })
        .collect();
    let buyers = admin.open_buyers("crash-buyer", &balances, 16).await?;
    admin
        .wait_for_quota(product.id, UNITS, Duration::from_secs(30))
        .await?;
    let pool = stack.admin_pool().await;
    let deposits = invariants::check(&pool).await?.balance_total;

    // Debits take a while, so the kill lands while payments are in every stage.
    stack
        .proxy(Link::OrchestratorToAccount)
        .expect("proxied")
        .set_latency(Duration::from_millis(100));
    let driver = Driver::new(endpoints, Duration::from_secs(5));
    let drop = {
        let driver = driver.clone();
        let buyers = buyers.clone();
        tokio::spawn(async move { driver.run_drop(&buyers, product.id, 0, |_| {}).await })
    };

    let deadline = Instant::now() + Duration::from_secs(60);
    let in_flight = loop {
        let n: i64 = sqlx::query_scalar(
            r#"SELECT COUNT(*) FROM payment_service.payments WHERE state NOT IN ('COMPLETED', 'FAILED', 'REFUNDED')"#,
        )
        .fetch_one(&pool)
        .await?;
        if n >= 3 {
            break n;
        }
        assert!(Instant::now() < deadline, "no payments started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    stack.stop(ServiceKind::Orchestrator, Stop::Kill).await?;
    eprintln!("killed the orchestrator with {in_flight} payments in flight");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.start_service(ServiceKind::Orchestrator).await?;
    stack
        .proxy(Link::OrchestratorToAccount)
        .expect("proxied")
        .heal();

    let attempts = drop.await?;
    assert_eq!(
        stack
            .services
            .process(ServiceKind::Orchestrator)
            .map(|p| p.starts()),
        Some(2)
    );

    // Recovery may still be finishing payments whose buyers stopped waiting.
    let report = invariants::settled(&pool, Duration::from_secs(90)).await?;
    assert_eq!(
        (report.payments_not_terminal, report.payments_settling),
        (0, 0),
        "payments never settled: {report:#?}\n{}",
        stack.log_paths()
    );
    eprintln!("{report:#?}");
    report.assert_holds();
    assert_eq!(report.balance_total, deposits);
    assert_eq!(report.units_sold, report.payments_completed);
    assert!(report.units_sold <= UNITS);

    // Every buyer got a definite answer, and it is the right one for their money.
    let funded: HashMap<&str, bool> = buyers
        .iter()
        .map(|b| (b.member.as_str(), b.balance >= PRICE))
        .collect();
    let mut completed = 0;
    for a in &attempts {
        match &a.outcome {
            Outcome::Completed => {
                assert!(
                    funded[a.member.as_str()],
                    "{} completed without the money",
                    a.member
                );
                completed += 1;
            }
            Outcome::Failed { .. } => {
                assert!(!funded[a.member.as_str()], "{} funded but FAILED", a.member)
            }
            Outcome::SoldOutAtGate | Outcome::SoldOutAtOrder => {}
            other => panic!(
                "{}: no definite answer: {other:?}\n{}",
                a.member,
                stack.log_paths()
            ),
        }
    }
    assert_eq!(
        completed, report.payments_completed,
        "what buyers were told matches the tables"
    );
    Ok(())
}
