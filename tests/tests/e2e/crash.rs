//! The orchestrator process killed with SIGKILL in the middle of a drop and started
//! again: buyers retry with their Idempotency-Keys, recovery finishes what the dead
//! process left, every payment ends terminal and the invariants hold.

use std::time::Duration;

use paysaga_e2e::{Driver, DropRun, Link, ServiceKind, Stack, StackOptions, Stop};

const UNITS: i64 = 30;
const BUYERS: usize = 200;
const PRICE: i64 = 7_500;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orchestrator_killed_mid_drop_and_restarted() -> anyhow::Result<()> {
    let mut stack = Stack::start(
        StackOptions::new("crash")
            .quick_takeover()
            .proxy(Link::OrchestratorToAccount),
    )
    .await?;
    let balances: Vec<i64> = (0..BUYERS)
        .map(|i| if i % 4 == 3 { PRICE / 2 } else { PRICE })
        .collect();
    let run = DropRun::open(&stack, "crash", PRICE, UNITS, &balances, 16).await?;

    // Debits take a while, so the kill lands while payments are in every stage.
    stack
        .proxy(Link::OrchestratorToAccount)
        .expect("proxied")
        .set_latency(Duration::from_millis(100));
    let driver = Driver::new(run.endpoints.clone(), Duration::from_secs(5));
    let drop = run.start(&driver, run.buyers.clone(), 0);
    let in_flight = run.payments_in_flight(3, Duration::from_secs(60)).await?;
    stack.stop(ServiceKind::Orchestrator, Stop::Kill).await?;
    eprintln!("killed the orchestrator with {in_flight} payments in flight");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.start_service(ServiceKind::Orchestrator).await?;
    stack
        .proxy(Link::OrchestratorToAccount)
        .expect("proxied")
        .heal();

    let attempts = drop.await?;
    assert_eq!(stack.starts(ServiceKind::Orchestrator), Some(2));

    // Recovery may still be finishing payments whose buyers stopped waiting.
    let report = run
        .settled(Duration::from_secs(90), &stack.log_paths())
        .await?;
    eprintln!("{report:#?}");

    // Every buyer got a definite answer, and it is the right one for their money.
    let answers = run.answers(&attempts, &stack.log_paths());
    assert_eq!(
        answers.completed, report.payments_completed,
        "what buyers were told matches the tables"
    );
    Ok(())
}
