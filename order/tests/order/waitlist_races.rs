//! The waitlist under concurrency: many units coming back at once by every path to a
//! long line (each unit offered to exactly one waiter, the first ones in line), a sweep
//! racing batch cancels, joins racing returns, and takes and leaves racing the offer
//! sweep. Everything is checked in PostgreSQL afterwards.

use std::sync::Arc;

use crate::support::{
    count_by, inconsistencies, offered_members, offered_units, unit_states, Harness,
};
use futures::future::join_all;
use paysaga_contracts::order::api::{OrderBatch, OrderOp, Reservation, WaitlistState};
use uuid::Uuid;

fn names(prefix: &str, n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("{prefix}-{i}")).collect()
}

async fn join_in_order(h: &Harness, product_id: i64, members: &[String]) {
    for (i, m) in members.iter().enumerate() {
        let e = h.buyer(m).join_waitlist(product_id).await.unwrap().body;
        assert_eq!(e.position, Some(i as i64 + 1));
    }
}

/// A product of `units` units, each held by a reservation of its own (`holder-0`, ...),
/// and `waiters` members (`w-1`, ...) in its line: the product's id, the reservations
/// and the line.
async fn held_with_line(
    h: &Harness,
    units: usize,
    waiters: usize,
) -> (i64, Vec<Reservation>, Vec<String>) {
    let product = h.product(units as i64).await;
    let held = h.reserve_many(product.id, units, "holder").await;
    let line = names("w", waiters);
    join_in_order(h, product.id, &line).await;
    (product.id, held, line)
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_units_back_at_once_each_to_exactly_one_waiter_first_in_line() {
    let h = Arc::new(Harness::start().await);
    let pool = h.service_pool().await;
    let (product_id, held, line) = held_with_line(&h, 60, 80).await;

    // 30 due (swept by three sweepers), 10 cancelled by their owners, 12 in three
    // batches through the endpoint, 8 confirmed then refunded: all at once.
    for r in &held[..30] {
        h.make_due(r.id).await;
    }
    for r in &held[52..] {
        h.service().confirm(r.id).await.unwrap();
    }
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            loop {
                let got = order::sweep::sweep_batch(&pool, 3).await.unwrap();
                n += got;
                if got == 0 {
                    return n;
                }
            }
        }));
    }
    for (i, r) in held[30..40].iter().enumerate() {
        let h = h.clone();
        let id = r.id;
        tasks.push(tokio::spawn(async move {
            h.buyer(&format!("holder-{}", 30 + i))
                .cancel(id)
                .await
                .unwrap();
            1
        }));
    }
    for chunk in held[40..52].chunks(4) {
        let h = h.clone();
        let ops = chunk
            .iter()
            .map(|r| OrderOp::Cancel {
                reservation_id: r.id,
            })
            .collect();
        tasks.push(tokio::spawn(async move {
            let replies = h.service().batch(&OrderBatch::new(ops)).await.unwrap().body;
            assert!(replies.results.iter().all(|r| r.status == 200));
            replies.results.len() as u64
        }));
    }
    for r in &held[52..] {
        let h = h.clone();
        let id = r.id;
        tasks.push(tokio::spawn(async move {
            h.service().cancel(id).await.unwrap();
            1
        }));
    }
    let swept: u64 = join_all(tasks).await.into_iter().map(|t| t.unwrap()).sum();
    assert_eq!(swept, 60, "every reservation ended exactly once");

    // Each of the 60 units is offered to exactly one waiter, and those are the first 60
    // in line; the last 20 still wait, in order.
    assert_eq!(unit_states(&h.admin, product_id).await, (0, 0, 0));
    assert_eq!(offered_units(&h.admin, product_id).await, 60);
    assert_eq!(
        offered_members(&h.admin, product_id).await,
        sorted(line[..60].to_vec())
    );
    for (i, m) in line[60..].iter().enumerate() {
        let e = h.buyer(m).waitlist_entry(product_id).await.unwrap().body;
        assert_eq!(
            (e.state, e.position),
            (WaitlistState::Waiting, Some(i as i64 + 1))
        );
    }
    Arc::into_inner(h).unwrap().stop_consistent().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sweep_racing_batch_cancels_of_the_same_reservations() {
    let h = Arc::new(Harness::start().await);
    let pool = h.service_pool().await;
    for round in 0..3 {
        let product = h.product(24).await;
        let held = h
            .reserve_many(product.id, 24, &format!("r{round}-holder"))
            .await;
        let line = names(&format!("r{round}-w"), 30);
        join_in_order(&h, product.id, &line).await;
        for r in &held {
            h.make_due(r.id).await;
        }
        // Two sweepers and four overlapping batches (each names twelve reservations,
        // every reservation is in two batches) over the same 24 due reservations.
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let pool = pool.clone();
            tasks.push(tokio::spawn(async move {
                while order::sweep::sweep_batch(&pool, 2).await.unwrap() > 0 {}
            }));
        }
        for k in 0..4 {
            let h = h.clone();
            let ops: Vec<OrderOp> = held
                .iter()
                .enumerate()
                .filter(|(i, _)| (i / 6 + k) % 4 < 2)
                .map(|(_, r)| OrderOp::Cancel {
                    reservation_id: r.id,
                })
                .collect();
            tasks.push(tokio::spawn(async move {
                let replies = h.service().batch(&OrderBatch::new(ops)).await.unwrap().body;
                assert!(
                    replies.results.iter().all(|r| r.status == 200),
                    "{replies:?}"
                );
            }));
        }
        for t in join_all(tasks).await {
            t.unwrap();
        }
        assert_eq!(
            offered_units(&h.admin, product.id).await,
            24,
            "round {round}"
        );
        assert_eq!(
            offered_members(&h.admin, product.id).await,
            sorted(line[..24].to_vec())
        );
        let events = count_by(&h.admin, r#"SELECT COUNT(*) FROM order_service.outbox_events WHERE type = 'waitlist.offer_made' AND data->>'product_id' = $1"#, product.id.to_string()).await;
        assert_eq!(events, 24);
        assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());
    }
    Arc::into_inner(h).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn joins_racing_returns_never_leave_a_unit_on_sale_while_someone_waits() {
    let h = Arc::new(Harness::start().await);
    for round in 0..4 {
        let product = h.product(20).await;
        let held = h
            .reserve_many(product.id, 20, &format!("j{round}-holder"))
            .await;
        // A few already wait (none in the first round, so the line starts empty and a
        // return can beat every join); thirty more join while the twenty units come
        // back, the requests interleaved.
        let early: usize = [0, 1, 2, 5][round];
        join_in_order(&h, product.id, &names(&format!("j{round}-early"), early)).await;
        let mut tasks = Vec::new();
        for (i, m) in names(&format!("j{round}-w"), 30).into_iter().enumerate() {
            let h2 = h.clone();
            let pid = product.id;
            tasks.push(tokio::spawn(async move {
                match h2.buyer(&m).join_waitlist(pid).await {
                    Ok(a) => Some(Ok(a.status)),
                    Err(e) => Some(Err(e.code().map(str::to_owned))),
                }
            }));
            if let Some(r) = held.get(i) {
                let h2 = h.clone();
                let (id, owner) = (r.id, format!("j{round}-holder-{i}"));
                tasks.push(tokio::spawn(async move {
                    h2.buyer(&owner).cancel(id).await.unwrap();
                    None
                }));
            }
        }
        let mut joined = early;
        for t in join_all(tasks).await {
            match t.unwrap() {
                None => {}
                Some(Ok(201)) => joined += 1,
                Some(Err(Some(code))) if code == "NOT_SOLD_OUT" => {}
                other => panic!("join answered {other:?}"),
            }
        }
        // Every unit came back: offered to as many joiners as there were (at most the
        // twenty units), the rest on sale only if nobody is left waiting.
        let offers = offered_units(&h.admin, product.id).await;
        let (available, reserved, sold) = unit_states(&h.admin, product.id).await;
        assert_eq!((reserved, sold, offers + available), (0, 0, 20));
        assert_eq!(
            offers,
            joined.min(20) as i64,
            "round {round}: {joined} joined"
        );
        eprintln!(
            "round {round}: {joined} of {} in line, {offers} offers, {available} on sale",
            early + 30
        );
        assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());
    }
    Arc::into_inner(h).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn takes_and_leaves_racing_the_offer_sweep_end_each_offer_once() {
    let h = Arc::new(Harness::start().await);
    let pool = h.service_pool().await;
    let (product_id, held, line) = held_with_line(&h, 20, 40).await;
    for (i, r) in held.iter().enumerate() {
        h.buyer(&format!("holder-{i}")).cancel(r.id).await.unwrap();
    }
    let offers: Vec<(String, Uuid)> = sqlx::query_as(
        r#"SELECT member_id, id FROM order_service.waitlist_offers WHERE state = 'OFFERED' ORDER BY member_id"#,
    )
    .fetch_all(&h.admin)
    .await
    .unwrap();
    assert_eq!(offers.len(), 20);
    // Every offer due now; its member takes it (even ones), leaves (odd ones) while two
    // offer sweeps run.
    sqlx::query(r#"UPDATE order_service.waitlist_offers SET expires_at = clock_timestamp() + INTERVAL '30 milliseconds'"#)
        .execute(&h.admin)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            order::waitlist::sweep(&pool, 3, 100).await.unwrap();
            None
        }));
    }
    for (i, (member, offer)) in offers.iter().cloned().enumerate() {
        let h = h.clone();
        let pid = product_id;
        tasks.push(tokio::spawn(async move {
            Some(if i % 2 == 0 {
                h.funded(&member)
                    .await
                    .take_offer(offer)
                    .await
                    .map(|a| a.status)
            } else {
                h.buyer(&member).leave_waitlist(pid).await.map(|a| a.status)
            })
        }));
    }
    for t in join_all(tasks).await {
        match t.unwrap() {
            None | Some(Ok(201 | 200)) => {}
            Some(Err(e)) => assert!(
                matches!(e.code(), Some("OFFER_EXPIRED" | "NOT_ON_WAITLIST")),
                "{e}"
            ),
            other => panic!("{other:?}"),
        }
    }
    // Each of the first twenty entries ended once: taken, left or expired; each offer
    // the same; the twenty units are reserved by a taker or offered to the next in line.
    let ended: Vec<(String, String, Option<String>)> = sqlx::query_as(
        r#"SELECT e.member_id, e.state, o.state FROM order_service.waitlist_entries e
           LEFT JOIN order_service.waitlist_offers o ON o.entry_id = e.id
           WHERE e.member_id = ANY($1) ORDER BY e.member_id"#,
    )
    .bind(&line[..20])
    .fetch_all(&h.admin)
    .await
    .unwrap();
    for (m, e, o) in &ended {
        let pair = (e.as_str(), o.as_deref());
        assert!(
            matches!(
                pair,
                ("TAKEN", Some("TAKEN"))
                    | ("LEFT", Some("RELEASED"))
                    | ("EXPIRED", Some("EXPIRED"))
            ),
            "{m}: {pair:?}"
        );
    }
    let taken = ended.iter().filter(|e| e.1 == "TAKEN").count() as i64;
    let (available, reserved, sold) = unit_states(&h.admin, product_id).await;
    assert_eq!((available, sold), (0, 0));
    assert_eq!(reserved, taken);
    assert_eq!(offered_units(&h.admin, product_id).await, 20 - taken);
    Arc::into_inner(h).unwrap().stop_consistent().await;
}

/// A returned unit meets the head of the line locked by another transaction, which then
/// rolls back (a handoff to that member cut off by a crash): the handoff waits for the
/// lock instead of passing the head over, and the head gets the unit, not the member
/// behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_returned_unit_waits_for_a_locked_head_of_the_line_and_goes_to_it() {
    let h = Arc::new(Harness::start().await);
    let (product_id, held, line) = held_with_line(&h, 2, 2).await;

    let mut other = h.admin.begin().await.unwrap();
    sqlx::query(
        r#"SELECT id FROM order_service.waitlist_entries
           WHERE product_id = $1 AND member_id = $2 FOR UPDATE"#,
    )
    .bind(product_id)
    .bind(&line[0])
    .fetch_one(&mut *other)
    .await
    .unwrap();
    let cancel = tokio::spawn({
        let h = h.clone();
        let id = held[0].id;
        async move { h.buyer("holder-0").cancel(id).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !cancel.is_finished(),
        "the cancel went on while the head of the line was locked"
    );
    other.rollback().await.unwrap();
    cancel.await.unwrap().unwrap();

    assert_eq!(
        offered_members(&h.admin, product_id).await,
        vec![line[0].clone()]
    );
    let e = h
        .buyer(&line[1])
        .waitlist_entry(product_id)
        .await
        .unwrap()
        .body;
    assert_eq!((e.state, e.position), (WaitlistState::Waiting, Some(1)));
    assert_eq!(unit_states(&h.admin, product_id).await, (0, 1, 0));
    Arc::into_inner(h).unwrap().stop_consistent().await;
}
