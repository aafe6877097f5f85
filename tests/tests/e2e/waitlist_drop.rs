//! A drop through the real processes in which buyers told SOLD_OUT wait in the waitlist:
//! every unit whose payment fails comes back to the next in line, so the drop sells out
//! however many payments fail. Checked from the answers buyers got and from PostgreSQL.
//!
//! Three buyers reserve first and pay only once the crowd is in line, after their
//! holds were released (as the reconciliation or an operator does): their payments
//! fail, so at least three units are certain to go through the waitlist. The crowd
//! arrives at once; every fourth of it cannot pay and is refused any unit that reaches
//! it (a pass's, whose unit then goes to the line, or an offer's).

use std::time::{Duration, Instant};

use paysaga_e2e::{
    sell_through, Driver, DropRun, ServiceKind, Stack, StackOptions, WaitEnd, WaitlistPolicy,
};

const UNITS: i64 = 10;
const BUYERS: usize = 40;
const PRICE: i64 = 5_000;
/// Buyers 0, 4 and 8 reserve before the crowd arrives.
const EARLY: [usize; 3] = [0, 4, 8];
/// The crowd is in line deeply enough that every unit that comes back finds a waiter:
/// at most one return per underfunded buyer, and only a return takes a waiter.
const LINE_BEFORE_RETURNS: i64 = (BUYERS / 4) as i64;

/// Every fourth buyer of the crowd holds half the price.
fn balance(i: usize) -> i64 {
    if i.is_multiple_of(4) && !EARLY.contains(&i) {
        PRICE / 2
    } else {
        PRICE * 2
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_payments_go_to_the_line_and_the_drop_sells_out() -> anyhow::Result<()> {
    let stack = Stack::start(
        StackOptions::new("waitlist-drop")
            .quick_loops()
            .env(ServiceKind::Order, "RESERVATION_TTL_SECS", 30)
            .env(ServiceKind::Order, "WAITLIST_OFFER_TTL_SECS", 5),
    )
    .await?;
    let balances: Vec<i64> = (0..BUYERS).map(balance).collect();
    let run = DropRun::open(&stack, "waitlist", PRICE, UNITS, &balances, 8).await?;
    let (buyers, pool, product) = (&run.buyers, &run.pool, &run.product);

    // The early buyers hold three units, unpaid.
    let plain = Driver::new(run.endpoints.clone(), Duration::from_secs(10));
    let mut early = Vec::new();
    for &i in &EARLY {
        let mut retries = 0;
        let pass = plain.pass(&buyers[i], product.id, &mut retries).await?;
        let r = plain
            .reserve(&buyers[i], product.id, &pass.pass, &mut retries)
            .await?;
        early.push((i, r.id));
    }

    // The crowd arrives at once; whoever is told SOLD_OUT joins the line.
    let crowd: Vec<_> = (0..BUYERS)
        .filter(|i| !EARLY.contains(i))
        .map(|i| buyers[i].clone())
        .collect();
    let waiting =
        Driver::new(run.endpoints.clone(), Duration::from_secs(10)).with_waitlist(WaitlistPolicy {
            poll: Duration::from_millis(200),
            wait_for: Duration::from_secs(20),
        });
    let drop = run.start(&waiting, crowd.clone(), 0);

    // Once the line is long enough, the early buyers' holds are released; they pay, and
    // fail.
    let guard = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            r#"SELECT COUNT(*) FROM order_service.waitlist_entries WHERE product_id = $1 AND state = 'WAITING'"#,
        )
        .bind(product.id)
        .fetch_one(pool)
        .await?;
        if waiting >= LINE_BEFORE_RETURNS {
            break;
        }
        anyhow::ensure!(
            Instant::now() < guard,
            "only {waiting} in line (hang guard)\nlogs:\n{}",
            stack.log_paths()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for &(i, reservation) in &early {
        run.admin.release_hold(reservation).await?;
        let mut retries = 0;
        let key = format!("early-{reservation}");
        let p = plain
            .pay(&buyers[i], reservation, &key, &mut retries)
            .await?;
        let p = plain
            .follow(&buyers[i], p)
            .await
            .map_err(|(p, why)| anyhow::anyhow!("early payment {} not final: {why}", p.id))?;
        assert_eq!(p.state, "FAILED", "{p:?}");
        assert_eq!(p.failure_code.as_deref(), Some("HOLD_RELEASED"));
    }
    let attempts = drop.await?;
    assert_eq!(attempts.len(), crowd.len());

    // What the buyers were told: a definite answer each; the funded ones that paid, the
    // underfunded ones refused a unit, the rest sold out (after waiting in line).
    let answers = run.answers(&attempts, &stack.log_paths());
    // The underfunded are refused whatever unit reaches them, a pass's or an offer's
    // (checked per answer below); whether any reaches one depends on the arrival order.
    eprintln!("underfunded buyers refused a unit: {}", answers.unfunded);
    for a in &attempts {
        match &a.outcome {
            o if o.is_sold_out() => {
                let w = a
                    .waitlist
                    .as_ref()
                    .expect("a sold-out buyer went to the line");
                assert!(
                    matches!(
                        &w.end,
                        WaitEnd::NothingHeld | WaitEnd::Refused { .. } | WaitEnd::Ended { .. }
                    ),
                    "{}: {w:?}",
                    a.member
                );
            }
            _ => {}
        }
    }
    let (completed, failed, via_waitlist) =
        (answers.completed, answers.failed, answers.via_waitlist);
    eprintln!("completed {completed} ({via_waitlist} through the waitlist), failed {failed}");

    // What the tables say: sold out, nothing left on sale or on offer, nobody in line.
    let report = run
        .settled(Duration::from_secs(60), &stack.log_paths())
        .await?;
    let st = sell_through::read(pool, product.id).await?;
    eprintln!("{st:#?}");
    assert_eq!(st.units_sold, UNITS, "every unit sold");
    assert_eq!(st.units_total, UNITS);
    assert_eq!(
        (st.units_available, st.units_offered, st.units_reserved),
        (0, 0, 0),
        "no unit on sale, on offer or held at the end"
    );
    assert_eq!(st.entries_waiting, 0, "nobody left in line");
    assert_eq!(st.offers_live, 0);
    assert_eq!(completed, UNITS, "one COMPLETED buyer per unit");
    assert_eq!(st.payments_completed, UNITS);
    assert_eq!(
        st.payments_failed,
        failed + EARLY.len() as i64,
        "every FAILED payment is one the buyers saw"
    );
    assert_eq!(st.sold_via_waitlist, via_waitlist);
    assert!(
        via_waitlist >= EARLY.len() as i64,
        "the early buyers' units were sold through the line ({via_waitlist})"
    );
    assert_eq!(
        st.offers_made,
        st.offers_taken + st.offers_expired + st.offers_released,
        "every offer ended"
    );
    assert_eq!(
        st.returns, st.payments_failed,
        "each FAILED payment gave its unit back"
    );
    assert_eq!(
        st.returns_next_via_offer + st.returns_next_on_sale,
        st.returns,
        "every unit that came back was reserved again"
    );
    // Units sold through the line: those back from a failed payment, and those freed by
    // a pass whose holder could not pay (at most one per refusal).
    let via_returns = st.return_to_completed_via_offer.count as i64;
    assert!(
        via_returns <= via_waitlist && via_waitlist - via_returns <= answers.unfunded,
        "through the line: {via_waitlist}, of them back from failed payments: {via_returns}, refusals for funds: {}",
        answers.unfunded
    );

    // Money: each buyer's balance is its opening balance, less the price once if and
    // only if it paid; the sum of balances did not change.
    assert_eq!(report.money_moved, UNITS * PRICE);
    run.balances_match(&attempts).await?;
    Ok(())
}
