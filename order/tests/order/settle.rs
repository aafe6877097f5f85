//! The settle statement (confirm, cancel, expiry): each operation alone (a statement of
//! one) and the same operations in one batch give the same answers and leave the same
//! tables; a batch naming a reservation twice runs in rounds, each committed; a refund
//! whose order was committed while the statement waited for the lock is run again and
//! applied; a broken unit fails the statement whole with the breach. An unasserted
//! timing prints what each costs.

use std::time::{Duration, Instant};

use crate::support::ops::{cancel, confirm, lookup};
use crate::support::{
    count, inconsistencies, order_state, orders_of, reservation_state, snapshot, state_rows,
    unit_states, Harness,
};
use order::{
    breach::{Breach, Holder},
    settle::{self, Canceller, Op},
    states::UnitState,
};
use paysaga_contracts::{
    batch::Reply,
    order::api::{OrderOp, Reservation, ReservationState},
};
use sqlx::PgPool;
use uuid::Uuid;

/// A reply as two worlds built the same way must agree on it (ids and times differ):
/// status, then the state or the error code, and whether an order is named.
fn shape(reply: &Reply) -> (u16, String, bool) {
    match serde_json::from_value::<Reservation>(reply.body.clone()) {
        Ok(r) => (reply.status, r.state.to_string(), r.order_id.is_some()),
        Err(_) => (
            reply.status,
            reply.body["code"].as_str().unwrap_or("?").to_owned(),
            false,
        ),
    }
}

/// The [`shape`] of each of `replies`, in order.
fn shapes(replies: &[Reply]) -> Vec<(u16, String, bool)> {
    replies.iter().map(shape).collect()
}

/// Asserts that `replies` have the shapes `expected`, in order: status, state or error
/// code, and whether an order is named.
#[track_caller]
fn assert_shapes(replies: &[Reply], expected: &[(u16, &str, bool)]) {
    let expected: Vec<(u16, String, bool)> = expected
        .iter()
        .map(|&(status, said, ordered)| (status, said.to_owned(), ordered))
        .collect();
    assert_eq!(shapes(replies), expected);
}

/// Each operation alone, one statement each, in order.
async fn one_by_one(pool: &PgPool, ops: &[OrderOp]) -> Vec<Reply> {
    let mut replies = Vec::with_capacity(ops.len());
    for op in ops {
        let mut reply = settle::batch(pool, std::slice::from_ref(op))
            .await
            .expect("a lone operation");
        replies.push(reply.pop().expect("one reply"));
    }
    replies
}

/// Every state a confirm or a cancel can meet, each reservation named once.
struct World {
    product: i64,
    named: Vec<Uuid>,
    ops: Vec<OrderOp>,
    /// The [`shape`] of the answer each of `ops` gets, alone or in one batch.
    answers: Vec<(u16, &'static str, bool)>,
}

impl World {
    /// A fresh harness, a pool of the service's role, and two worlds built alike,
    /// tagged `a` and `b`.
    async fn twins(a: &str, b: &str) -> (Harness, PgPool, World, World) {
        let h = Harness::start().await;
        let pool = h.service_pool().await;
        let (a, b) = (World::build(&h, a).await, World::build(&h, b).await);
        (h, pool, a, b)
    }

    async fn build(h: &Harness, tag: &str) -> World {
        let svc = h.service();
        let (product, rs) = h.product_reserved(11, tag).await;
        svc.confirm(rs[4]).await.unwrap();
        svc.cancel(rs[5]).await.unwrap();
        svc.cancel(rs[10]).await.unwrap();
        h.make_due(rs[6]).await;
        // Expired by its confirm (409), which is all this call is for.
        let _ = svc.confirm(rs[6]).await;
        h.make_due(rs[7]).await;
        h.make_due(rs[8]).await;
        // Each operation beside the answer it gets.
        let (ops, answers) = [
            (confirm(rs[0]), (200, "CONFIRMED", true)),
            (cancel(rs[1]), (200, "CANCELLED", false)),
            // Already confirmed: the same reservation.
            (confirm(rs[4]), (200, "CONFIRMED", true)),
            // Cancelled, expired, and due (expired here).
            (confirm(rs[5]), (409, "RESERVATION_CANCELLED", false)),
            (confirm(rs[6]), (409, "RESERVATION_EXPIRED", false)),
            (confirm(rs[7]), (409, "RESERVATION_EXPIRED", false)),
            // Due: expired here.
            (cancel(rs[8]), (200, "EXPIRED", false)),
            // Cancelled: unchanged.
            (cancel(rs[10]), (200, "CANCELLED", false)),
            (
                confirm(Uuid::now_v7()),
                (404, "RESERVATION_NOT_FOUND", false),
            ),
            (confirm(rs[2]), (200, "CONFIRMED", true)),
            (
                cancel(Uuid::now_v7()),
                (404, "RESERVATION_NOT_FOUND", false),
            ),
            (confirm(rs[3]), (200, "CONFIRMED", true)),
            (cancel(rs[9]), (200, "CANCELLED", false)),
        ]
        .into_iter()
        .unzip();
        World {
            product: product.id,
            named: rs,
            ops,
            answers,
        }
    }

    /// Each reservation's state and its orders' states, in build order.
    async fn tables(&self, h: &Harness) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for id in &self.named {
            let orders = orders_of(&h.admin, *id).await;
            out.push((reservation_state(&h.admin, *id).await, orders));
        }
        out
    }
}

/// Every 200 body is the row as stored: what the single lookup answers now.
async fn bodies_are_stored_rows(h: &Harness, replies: &[Reply]) {
    let svc = h.service();
    for reply in replies.iter().filter(|r| r.status == 200) {
        let r: Reservation = serde_json::from_value(reply.body.clone()).unwrap();
        let stored = svc.reservation(r.id).await.unwrap().body;
        assert_eq!(r, stored, "the answer is what was written");
    }
}

/// The `updated_at` of the reservations `replies` changed: one value when one
/// statement wrote them all (its `now()`).
fn write_times(replies: &[Reply], before: chrono::DateTime<chrono::Utc>) -> Vec<String> {
    let mut times: Vec<String> = replies
        .iter()
        .filter_map(|r| serde_json::from_value::<Reservation>(r.body.clone()).ok())
        .filter(|r| r.updated_at > before)
        .map(|r| r.updated_at.to_rfc3339())
        .collect();
    times.sort();
    times.dedup();
    times
}

#[tokio::test]
async fn lone_operations_and_one_batch_agree() {
    let (h, pool, a, b) = World::twins("a", "b").await;

    let started = chrono::Utc::now();
    let batched = settle::batch(&pool, &a.ops).await.expect("one batch");
    let lone = one_by_one(&pool, &b.ops).await;

    assert_eq!(shapes(&batched), shapes(&lone));
    assert_shapes(&batched, &a.answers);
    // Whole error bodies agree too (codes and messages).
    for (f, g) in batched.iter().zip(&lone) {
        if f.status != 200 {
            assert_eq!(f, g);
        }
    }
    bodies_are_stored_rows(&h, &batched).await;
    bodies_are_stored_rows(&h, &lone).await;
    // The batch is one statement: everything it moved carries its one `now()`.
    assert_eq!(write_times(&batched, started).len(), 1);

    let tables = a.tables(&h).await;
    assert_eq!(tables, b.tables(&h).await);
    let expected = state_rows(&[
        ("CONFIRMED", &["CONFIRMED"]),
        ("CANCELLED", &[]),
        ("CONFIRMED", &["CONFIRMED"]),
        ("CONFIRMED", &["CONFIRMED"]),
        ("CONFIRMED", &["CONFIRMED"]),
        ("CANCELLED", &[]),
        ("EXPIRED", &[]),
        ("EXPIRED", &[]),
        ("EXPIRED", &[]),
        ("CANCELLED", &[]),
        ("CANCELLED", &[]),
    ]);
    assert_eq!(tables, expected);
    assert_eq!(unit_states(&h.admin, a.product).await, (7, 0, 4));
    assert_eq!(unit_states(&h.admin, b.product).await, (7, 0, 4));
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());

    // Again, each world the other way: nothing changes and the answers repeat.
    let before = snapshot(&h.admin).await;
    let a_again = one_by_one(&pool, &a.ops).await;
    let b_again = settle::batch(&pool, &b.ops).await.unwrap();
    assert_eq!(snapshot(&h.admin).await, before);
    assert_eq!(a_again, batched);
    assert_eq!(b_again, lone);
    h.stop().await;
}

/// Lookups beside confirms and cancels of other reservations (the orchestrator's usual
/// batch) are a plain read in the same statement: the same answers and the same tables
/// as each operation alone in a twin world.
#[tokio::test]
async fn lookups_beside_writes_answer_as_lone_lookups() {
    let (h, pool, a, b) = World::twins("la", "lb").await;
    let mixed = |w: &World| -> Vec<OrderOp> {
        let mut ops = w.ops.clone();
        // Lookups of reservations no write names: a confirmed one, a reserved one, a
        // cancelled one; and of one that does not exist.
        ops.insert(1, lookup(w.named[4]));
        ops.insert(4, lookup(w.named[10]));
        ops.push(lookup(Uuid::now_v7()));
        ops.push(lookup(w.named[5]));
        ops
    };
    // rs[4], rs[5] and rs[10] are also written by the world's own ops: drop those writes,
    // so the lookups name only reservations no write in the batch names.
    let only_lookups_of = |w: &World| -> Vec<OrderOp> {
        let looked = [w.named[4], w.named[5], w.named[10]];
        mixed(w)
            .into_iter()
            .filter(|op| match op {
                OrderOp::Reservation { .. } => true,
                OrderOp::Confirm { reservation_id } | OrderOp::Cancel { reservation_id } => {
                    !looked.contains(reservation_id)
                }
            })
            .collect()
    };
    let a_ops = only_lookups_of(&a);
    let b_ops = only_lookups_of(&b);
    let orders = || count(&h.admin, r#"SELECT COUNT(*) FROM order_service.orders"#);
    let before = orders().await;
    let started = chrono::Utc::now();
    let batched = settle::batch(&pool, &a_ops).await.expect("mixed batch");
    let lone = one_by_one(&pool, &b_ops).await;
    assert_eq!(shapes(&batched), shapes(&lone));
    assert_eq!(
        batched[1].status, 200,
        "a lookup of a confirmed reservation"
    );
    assert_eq!(
        batched[batched.len() - 2].status,
        404,
        "a lookup of nothing"
    );
    for (f, g) in batched.iter().zip(&lone) {
        if f.status != 200 {
            assert_eq!(f, g);
        }
    }
    bodies_are_stored_rows(&h, &batched).await;
    assert_eq!(write_times(&batched, started).len(), 1, "one statement");
    assert_eq!(a.tables(&h).await, b.tables(&h).await);
    assert_eq!(
        unit_states(&h.admin, a.product).await,
        unit_states(&h.admin, b.product).await
    );
    // Three confirms of reserved units in each world became orders.
    assert_eq!(orders().await, before + 6);
    h.stop_consistent().await;
}

#[tokio::test]
async fn a_refund_in_a_batch_cancels_the_order_as_alone() {
    let (h, pool, product, rs) = Harness::all_reserved(4, "m").await;
    h.service().confirm(rs[1].id).await.unwrap();
    h.service().confirm(rs[3].id).await.unwrap();

    let batched = settle::batch(&pool, &[confirm(rs[0].id), cancel(rs[1].id)])
        .await
        .unwrap();
    let lone = one_by_one(&pool, &[confirm(rs[2].id), cancel(rs[3].id)]).await;
    assert_eq!(shapes(&batched), shapes(&lone));
    assert_shapes(
        &batched,
        &[(200, "CONFIRMED", true), (200, "CANCELLED", true)],
    );
    assert_eq!(unit_states(&h.admin, product.id).await, (2, 0, 2));
    for refunded in [rs[1].id, rs[3].id] {
        let orders = orders_of(&h.admin, refunded).await;
        assert_eq!(orders, vec!["CANCELLED".to_owned()]);
    }
    h.stop_consistent().await;
}

/// A service cancel that waits for the reservation's lock while a confirm commits finds
/// it CONFIRMED, but its statement cannot see the order that confirm wrote (newer than
/// its snapshot): it writes nothing, runs again, and the refund is applied whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_whose_order_was_committed_meanwhile_is_run_again() {
    let (h, pool, product, mut rs) = Harness::all_reserved(1, "m").await;
    let r = rs.remove(0);

    // The confirm, by hand in one transaction holding the reservation's lock, as the
    // statement writes it.
    let mut confirming = h.admin.begin().await.unwrap();
    let order_id = Uuid::now_v7();
    sqlx::query(r#"SELECT 1 FROM order_service.reservations WHERE id = $1 FOR UPDATE"#)
        .bind(r.id)
        .execute(&mut *confirming)
        .await
        .unwrap();
    let cancel = tokio::spawn({
        let pool = pool.clone();
        async move { settle::one(&pool, Op::Cancel(r.id, Canceller::Service)).await }
    });
    wait_for_lock_wait(&h).await;
    sqlx::query(
        r#"
        WITH sold AS (
            UPDATE order_service.product_stock SET state = 'SOLD' WHERE id = $3 AND state = 'RESERVED'
        ), ordered AS (
            INSERT INTO order_service.orders (id, reservation_id, product_id, unit_id, member_id, price)
            VALUES ($2, $1, $4, $3, $5, $6)
        )
        UPDATE order_service.reservations SET state = 'CONFIRMED', order_id = $2 WHERE id = $1
        "#,
    )
    .bind(r.id)
    .bind(order_id)
    .bind(r.unit_id)
    .bind(product.id)
    .bind(r.member_id.as_str())
    .bind(r.price)
    .execute(&mut *confirming)
    .await
    .unwrap();
    confirming.commit().await.unwrap();

    let refunded = cancel.await.unwrap().expect("the refund is applied");
    assert_eq!(
        (refunded.state, refunded.order_id),
        (ReservationState::Cancelled, Some(order_id))
    );
    assert_eq!(order_state(&h.admin, order_id).await, "CANCELLED");
    assert_eq!(unit_states(&h.admin, product.id).await, (1, 0, 0));
    h.stop_consistent().await;
}

/// Until one of the service's statements waits for a row lock.
async fn wait_for_lock_wait(h: &Harness) {
    for _ in 0..1_000 {
        let waiting = h
            .count(
                r#"
            SELECT COUNT(*) FROM pg_stat_activity
            WHERE datname = current_database() AND usename = 'order_app'
              AND wait_event_type = 'Lock'
            "#,
            )
            .await;
        if waiting == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the statement never waited for the lock");
}

/// A batch naming a reservation twice: the second operation runs in a round of its
/// own, after the first committed, and sees it. A later round that fails answers its
/// own operations with the failure; the first round's stay committed and answered.
#[tokio::test]
async fn a_reservation_named_twice_runs_in_rounds_each_committed() {
    let (h, pool, product, rs) = Harness::all_reserved(3, "m").await;

    let ops = [
        confirm(rs[0].id),
        lookup(rs[0].id),
        cancel(rs[0].id),
        confirm(rs[1].id),
    ];
    let replies = settle::batch(&pool, &ops).await.unwrap();
    assert_shapes(
        &replies,
        &[
            (200, "CONFIRMED", true),
            (200, "CONFIRMED", true),
            (200, "CANCELLED", true),
            (200, "CONFIRMED", true),
        ],
    );
    assert_eq!(
        replies[0], replies[1],
        "the lookup sees the confirm before it"
    );
    assert_eq!(reservation_state(&h.admin, rs[0].id).await, "CANCELLED");
    assert_eq!(unit_states(&h.admin, product.id).await, (1, 1, 1));

    // rs[2]'s unit broken by hand: its confirm, in the second round, fails that round.
    let fresh = h.reserve_many(product.id, 1, "late").await.remove(0);
    h.break_unit(rs[2].unit_id, "AVAILABLE").await;
    let replies = settle::batch(
        &pool,
        &[lookup(rs[2].id), confirm(fresh.id), confirm(rs[2].id)],
    )
    .await
    .expect("the first round committed");
    assert_shapes(
        &replies,
        &[
            (200, "RESERVED", false),
            (200, "CONFIRMED", true),
            (500, "INTERNAL", false),
        ],
    );
    assert_eq!(reservation_state(&h.admin, fresh.id).await, "CONFIRMED");
    assert_eq!(reservation_state(&h.admin, rs[2].id).await, "RESERVED");
    h.stop().await;
}

#[tokio::test]
async fn the_statement_fails_whole_on_a_broken_unit() {
    let (h, pool, _, rs) = Harness::all_reserved(3, "m").await;
    h.break_unit(rs[2].unit_id, "SOLD").await;
    let before = snapshot(&h.admin).await;
    let ops = vec![confirm(rs[0].id), cancel(rs[1].id), confirm(rs[2].id)];
    match settle::batch(&pool, &ops).await {
        Err(order::Error::Invariant(breach)) => assert_eq!(
            breach,
            Breach::Unit {
                unit_id: rs[2].unit_id,
                holder: Some(Holder::Reservation(rs[2].id)),
                expected: UnitState::Reserved,
                found: Some(UnitState::Sold),
            }
        ),
        Err(e) => panic!("not the invariant breach: {e:?}"),
        Ok(r) => panic!("applied: {r:?}"),
    }
    assert_eq!(snapshot(&h.admin).await, before, "nothing written");
    // The failed statement's locks are gone: the sound ones apply at once.
    let replies = tokio::time::timeout(Duration::from_secs(5), settle::batch(&pool, &ops[..2]))
        .await
        .expect("no lock left behind")
        .unwrap();
    assert_shapes(
        &replies,
        &[(200, "CONFIRMED", true), (200, "CANCELLED", false)],
    );
    h.stop().await;
}

/// `n` reservations made straight in the tables (faster than through the API): each
/// holds one unit of a new product.
async fn seed(h: &Harness, n: i64) -> Vec<Uuid> {
    let product = h.product(n).await;
    sqlx::query_scalar(
        r#"
        WITH u AS (
            UPDATE order_service.product_stock
            SET state = 'RESERVED'
            WHERE product_id = $1
            RETURNING id, product_id
        )
        INSERT INTO order_service.reservations (id, product_id, unit_id, member_id, pass_id, price, state, expires_at)
        SELECT gen_random_uuid(), u.product_id, u.id, 'bench-' || u.id, gen_random_uuid(), 12900, 'RESERVED',
               now() + INTERVAL '1 hour'
        FROM u
        RETURNING id
        "#,
    )
    .bind(product.id)
    .fetch_all(&h.admin)
    .await
    .unwrap()
}

/// CPU seconds the backend serving `pool`'s only connection has used (Linux, the
/// server on this machine).
async fn backend_cpu(pool: &PgPool) -> Option<f64> {
    let pid: i32 = sqlx::query_scalar(r#"SELECT pg_backend_pid()"#)
        .fetch_one(pool)
        .await
        .ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime, fields 14 and 15 of the whole line, in clock ticks (100 a second).
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn per(a: Option<f64>, b: Option<f64>, n: usize) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.3} ms", (b - a) * 1e3 / n as f64),
        _ => "unknown".to_owned(),
    }
}

/// Prints time and PostgreSQL CPU of confirms and claims, lone and batched (no timed
/// assertion: machines are noisy), and checks what they wrote. `SETTLE_BATCHES` sets
/// the batches per row (default 40; 400 for steadier figures).
#[tokio::test]
async fn time_per_batch() {
    let batches: usize = std::env::var("SETTLE_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    const SIZE: usize = 5;
    let h = Harness::start().await;
    // One connection: every statement on one backend, whose CPU time is read from /proc.
    let pool = paysaga_common::db::connect(&h.db.role_url("order_app"), order::SCHEMA, 1)
        .await
        .unwrap();
    for (name, batched) in [("five lone confirms", false), ("one batch of five", true)] {
        let ids = seed(&h, (batches * SIZE) as i64).await;
        let cpu0 = backend_cpu(&pool).await;
        let start = Instant::now();
        for chunk in ids.chunks(SIZE) {
            let ops: Vec<OrderOp> = chunk.iter().map(|id| confirm(*id)).collect();
            let replies = if batched {
                settle::batch(&pool, &ops).await.unwrap()
            } else {
                one_by_one(&pool, &ops).await
            };
            assert!(replies.iter().all(|r| r.status == 200));
        }
        let wall = start.elapsed().as_secs_f64() * 1e3 / batches as f64;
        eprintln!(
            "{name}: {batches} times: {wall:.3} ms each, PostgreSQL CPU {}",
            per(cpu0, backend_cpu(&pool).await, batches)
        );
    }

    let product = h.product((2 * batches * SIZE) as i64).await;
    let claims = |tag: &str, i: usize| -> Vec<order::claim::NewClaim> {
        (0..SIZE)
            .map(|k| {
                order::claim::NewClaim::unfunded(
                    product.id,
                    paysaga_common::auth::MemberId::parse(format!("{tag}-{i}-{k}")).unwrap(),
                    Uuid::now_v7(),
                    Duration::from_secs(600),
                    1,
                )
            })
            .collect()
    };
    for (name, tag, batched) in [
        ("five lone claims", "lone", false),
        ("one flush of five", "flush", true),
    ] {
        let cpu0 = backend_cpu(&pool).await;
        let start = Instant::now();
        for i in 0..batches {
            let flush = claims(tag, i);
            let outcomes = if batched {
                order::claim::claim(&pool, &flush).await.unwrap()
            } else {
                let mut out = Vec::new();
                for c in flush {
                    out.extend(order::claim::claim(&pool, &[c]).await.unwrap());
                }
                out
            };
            assert!(outcomes
                .iter()
                .all(|o| matches!(o, Ok(order::claim::Claim::Created(_)))));
        }
        let wall = start.elapsed().as_secs_f64() * 1e3 / batches as f64;
        eprintln!(
            "{name}: {batches} times: {wall:.3} ms each, PostgreSQL CPU {}",
            per(cpu0, backend_cpu(&pool).await, batches)
        );
    }
    // What they wrote: every confirm sold its unit and made its order, every claim
    // reserved a unit, and the tables agree with each other.
    let (sold, orders): (i64, i64) = sqlx::query_as(
        r#"SELECT (SELECT COUNT(*) FROM order_service.product_stock WHERE state = 'SOLD'),
                  (SELECT COUNT(*) FROM order_service.orders)"#,
    )
    .fetch_one(&h.admin)
    .await
    .unwrap();
    let confirmed = (2 * batches * SIZE) as i64;
    assert_eq!((sold, orders), (confirmed, confirmed));
    let (_, reserved, _) = unit_states(&h.admin, product.id).await;
    assert_eq!(reserved, (2 * batches * SIZE) as i64);
    h.stop_consistent().await;
}
