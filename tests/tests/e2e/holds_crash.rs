//! Holds through crashes: the account, order and orchestrator processes SIGKILLed in
//! turn while buyers reserve (holds being placed and released) and pay (holds being
//! captured), each started again. Buyers retry with the same pass and Idempotency-Key.
//! Afterwards, read from PostgreSQL: every live hold belongs to a live reservation,
//! every live reservation holds its price, no account's available balance is below
//! zero, each hold was captured or released once, every sale captured its own hold,
//! nothing is held any more, and each buyer's money is right. A funded buyer holds
//! exactly one unit's price, so any money counted twice would have refused one.

use std::time::{Duration, Instant};

use paysaga_e2e::{Driver, DropRun, ServiceKind, Stack, StackOptions, Stop};
use sqlx::PgPool;

const UNITS: i64 = 30;
const BUYERS: usize = 120;
const PRICE: i64 = 5_000;

/// Holds on accounts right now: held, within their deadline.
async fn live_holds(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM account_service.holds WHERE state = 'HELD' AND expires_at > now()"#,
    )
    .fetch_one(pool)
    .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_stay_whole_through_account_order_and_orchestrator_crashes() -> anyhow::Result<()> {
    let mut stack = Stack::start(StackOptions::new("holds-crash").quick_takeover().env(
        ServiceKind::Order,
        "ACCOUNT_TIMEOUT_MS",
        1000,
    ))
    .await?;
    // Every fourth buyer is a cent short: refused a unit, nothing held.
    let balances: Vec<i64> = (0..BUYERS)
        .map(|i| if i % 4 == 3 { PRICE - 1 } else { PRICE })
        .collect();
    let run = DropRun::open(&stack, "holds-crash", PRICE, UNITS, &balances, 16).await?;
    let driver = Driver::new(run.endpoints.clone(), Duration::from_secs(5));
    // A few at a time, so the drop outlasts the three kills.
    let drop = run.start(&driver, run.buyers.clone(), 6);

    let mut struck_with_holds = 0;
    for kind in [
        ServiceKind::Account,
        ServiceKind::Order,
        ServiceKind::Orchestrator,
    ] {
        let deadline = Instant::now() + Duration::from_secs(30);
        let live = loop {
            let live = live_holds(&run.pool).await?;
            if live > 0 || drop.is_finished() || Instant::now() >= deadline {
                break live;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        stack.stop(kind, Stop::Kill).await?;
        eprintln!("killed {kind:?} with {live} holds live");
        if live > 0 {
            struck_with_holds += 1;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        stack.start_service(kind).await?;
    }
    let attempts = drop.await?;
    assert_eq!(attempts.len(), BUYERS);
    assert!(
        struck_with_holds > 0,
        "no kill came while a hold was live: the drop ended too soon"
    );

    // Every payment terminal, every hold settled, every invariant (holds included).
    let report = run
        .settled(Duration::from_secs(90), &stack.log_paths())
        .await?;
    eprintln!("{report:#?}");
    let answers = run.answers(&attempts, &stack.log_paths());
    assert_eq!(answers.completed, report.payments_completed);
    assert!(answers.unfunded > 0, "the underfunded were refused a unit");
    assert_eq!(
        (report.holds_live, report.money_held),
        (0, 0),
        "nothing is held once every reservation has ended or been paid"
    );
    assert_eq!(
        report.holds_captured, report.payments_completed,
        "each sale captured its own hold, once"
    );
    run.balances_match(&attempts).await?;
    Ok(())
}
