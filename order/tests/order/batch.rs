//! `POST /v1/batch`: each operation answered exactly as its own endpoint would, the
//! confirms and cancels applied once and together, racing safely with single calls and
//! the sweep, and refused whole when too large, from a buyer, or when one breaks an
//! invariant.

use std::{collections::HashMap, time::Duration};

use crate::support::ops::{cancel, confirm, lookup};
use crate::support::{
    count_by, inconsistencies, refused, reservation_state, rows_by, snapshot, state_rows,
    unit_states, Harness,
};
use futures::future::join_all;
use paysaga_common::{
    client::{Answer, CallError},
    ErrorBody,
};
use paysaga_contracts::{
    batch::{Reply, MAX_OPS},
    order::{
        api::{OrderBatch, OrderOp, Reservation, ReservationState},
        client::OrderClient,
    },
};
use uuid::Uuid;

type Single = Result<Answer<Reservation>, CallError>;

/// An answer with its latency dropped, so a batch reply and a whole response compare.
#[derive(Debug, Clone, PartialEq)]
enum Said {
    Ok(u16, Reservation),
    No(u16, ErrorBody),
}

impl Said {
    /// What two worlds built the same way must agree on (ids and times differ).
    fn shape(&self) -> (u16, String) {
        match self {
            Said::Ok(s, r) => (*s, r.state.to_string()),
            Said::No(s, e) => (*s, e.code.clone()),
        }
    }
}

fn said(answer: Single) -> Said {
    match answer {
        Ok(a) => Said::Ok(a.status, a.body),
        Err(CallError::Rejected { status, body }) => Said::No(status, body),
        Err(e) => panic!("not a definite answer: {e}"),
    }
}

fn reply_said(reply: Reply) -> Said {
    said(reply.into_answer(Duration::ZERO))
}

/// The op through its own endpoint, with a service credential.
async fn single(svc: &OrderClient, op: OrderOp) -> Said {
    said(match op {
        OrderOp::Confirm { reservation_id } => svc.confirm(reservation_id).await,
        OrderOp::Cancel { reservation_id } => svc.cancel(reservation_id).await,
        OrderOp::Reservation { reservation_id } => svc.reservation(reservation_id).await,
    })
}

async fn batch(svc: &OrderClient, ops: &[OrderOp]) -> Vec<Said> {
    let replies = svc
        .batch(&OrderBatch::new(ops.to_vec()))
        .await
        .expect("batch answered 200")
        .body
        .results;
    assert_eq!(replies.len(), ops.len(), "one reply per operation");
    replies.into_iter().map(reply_said).collect()
}

fn id_of(op: &OrderOp) -> Uuid {
    match *op {
        OrderOp::Confirm { reservation_id }
        | OrderOp::Cancel { reservation_id }
        | OrderOp::Reservation { reservation_id } => reservation_id,
    }
}

/// The orders made from one reservation, `(id, state)`, oldest first.
async fn order_rows(h: &Harness, reservation: Uuid) -> Vec<(Uuid, String)> {
    rows_by(
        &h.admin,
        r#"SELECT id, state FROM order_service.orders WHERE reservation_id = $1 ORDER BY id"#,
        reservation,
    )
    .await
}

#[tokio::test]
async fn a_batch_of_confirms_applies_each_once() {
    let (h, product, rs) = Harness::with_reserved(100, "m").await;
    let svc = h.service();

    let ops: Vec<OrderOp> = rs.iter().map(|r| confirm(r.id)).collect();
    let first = batch(&svc, &ops).await;
    for (r, said) in rs.iter().zip(&first) {
        let Said::Ok(200, c) = said else {
            panic!("confirm of a fresh reservation: {said:?}");
        };
        assert_eq!(c.state, ReservationState::Confirmed);
        assert_eq!((c.id, c.unit_id), (r.id, r.unit_id));
        // Exactly what the stored row says, and what the single endpoint answers now.
        assert_eq!(&single(&svc, lookup(r.id)).await, said);
        assert_eq!(&single(&svc, confirm(r.id)).await, said);
        let orders = order_rows(&h, r.id).await;
        assert_eq!(orders, vec![(c.order_id.unwrap(), "CONFIRMED".to_owned())]);
    }
    assert_eq!(unit_states(&h.admin, product.id).await, (0, 0, 100));
    let confirmed = count_by(&h.admin, r#"SELECT COUNT(*) FROM order_service.reservations WHERE product_id = $1 AND state = 'CONFIRMED'"#, product.id).await;
    assert_eq!(confirmed, 100);
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());

    // Again: the same answers, nothing written.
    let before = snapshot(&h.admin).await;
    assert_eq!(batch(&svc, &ops).await, first);
    assert_eq!(snapshot(&h.admin).await, before);
    let orders = h
        .count(r#"SELECT COUNT(*) FROM order_service.orders"#)
        .await;
    assert_eq!(orders, 100, "never more sold than the stock");
    h.stop().await;
}

/// The same situation built twice (one world answered by a batch, its twin by the
/// single endpoints one at a time).
struct World {
    product: i64,
    fresh: [Uuid; 4],
    confirmed: [Uuid; 2],
    cancelled: Uuid,
    due: [Uuid; 2],
    unknown: Uuid,
}

impl World {
    async fn build(h: &Harness, tag: &str) -> World {
        let svc = h.service();
        let (product, rs) = h.product_reserved(9, tag).await;
        for id in &rs[4..6] {
            svc.confirm(*id).await.unwrap();
        }
        svc.cancel(rs[6]).await.unwrap();
        for id in &rs[7..9] {
            h.make_due(*id).await;
        }
        World {
            product: product.id,
            fresh: [rs[0], rs[1], rs[2], rs[3]],
            confirmed: [rs[4], rs[5]],
            cancelled: rs[6],
            due: [rs[7], rs[8]],
            unknown: Uuid::new_v4(),
        }
    }

    fn ops(&self) -> Vec<OrderOp> {
        let [f1, f2, f3, f4] = self.fresh;
        let [c1, c2] = self.confirmed;
        let [d1, d2] = self.due;
        let (x, u) = (self.cancelled, self.unknown);
        vec![
            lookup(f3), // before its cancel below: still RESERVED
            confirm(f1),
            confirm(c1),
            confirm(x),
            confirm(d1),
            confirm(u),
            cancel(u),
            lookup(u),
            lookup(f2),
            cancel(c2), // operator refund: order cancelled, unit back on sale
            cancel(f3),
            cancel(d2),
            cancel(x),
            confirm(f1), // repeat: the same answer
            lookup(f1),
            confirm(f4),
            cancel(f4),
            confirm(f4), // after its own cancel in this batch
            lookup(f4),
            lookup(d1),
            lookup(d2),
        ]
    }

    async fn states(&self, h: &Harness) -> Vec<(String, Vec<String>)> {
        let mut ids = self.fresh.to_vec();
        ids.extend(self.confirmed);
        ids.push(self.cancelled);
        ids.extend(self.due);
        let mut out = Vec::new();
        for id in ids {
            let orders = order_rows(h, id).await.into_iter().map(|o| o.1).collect();
            out.push((reservation_state(&h.admin, id).await, orders));
        }
        out
    }
}

#[tokio::test]
async fn a_mixed_batch_answers_as_the_single_endpoints_do() {
    let h = Harness::start().await;
    let svc = h.service();
    let a = World::build(&h, "a").await;
    let b = World::build(&h, "b").await;
    let before_confirmed = single(&svc, confirm(a.confirmed[0])).await;

    let ops = a.ops();
    let replies = batch(&svc, &ops).await;
    let mut singles = Vec::new();
    for op in b.ops() {
        singles.push(single(&svc, op).await);
    }
    for ((op, r), s) in ops.iter().zip(&replies).zip(&singles) {
        assert_eq!(r.shape(), s.shape(), "{op:?}");
    }
    let shapes: Vec<(u16, String)> = replies.iter().map(Said::shape).collect();
    let expected: Vec<(u16, &str)> = vec![
        (200, "RESERVED"),
        (200, "CONFIRMED"),
        (200, "CONFIRMED"),
        (409, "RESERVATION_CANCELLED"),
        (409, "RESERVATION_EXPIRED"),
        (404, "RESERVATION_NOT_FOUND"),
        (404, "RESERVATION_NOT_FOUND"),
        (404, "RESERVATION_NOT_FOUND"),
        (200, "RESERVED"),
        (200, "CANCELLED"),
        (200, "CANCELLED"),
        (200, "EXPIRED"),
        (200, "CANCELLED"),
        (200, "CONFIRMED"),
        (200, "CONFIRMED"),
        (200, "CONFIRMED"),
        (200, "CANCELLED"),
        (409, "RESERVATION_CANCELLED"),
        (200, "CANCELLED"),
        (200, "EXPIRED"),
        (200, "EXPIRED"),
    ];
    let expected: Vec<(u16, String)> = expected
        .into_iter()
        .map(|(s, c)| (s, c.to_owned()))
        .collect();
    assert_eq!(shapes, expected);

    // Exact bodies: an already-confirmed one answers as it did before the batch; the
    // repeat and the lookup after a confirm answer the very same reservation.
    assert_eq!(replies[2], before_confirmed);
    assert_eq!(replies[1], replies[13]);
    assert_eq!(replies[1], replies[14]);
    // The last operation on each id left it where it stays, so the single endpoint,
    // asked the same now, answers exactly the same (bodies, times, order ids).
    let mut last: HashMap<Uuid, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        last.insert(id_of(op), i);
    }
    for i in last.into_values() {
        assert_eq!(single(&svc, ops[i]).await, replies[i], "{:?}", ops[i]);
    }

    // The tables of both worlds agree, and with the answers.
    let states = a.states(&h).await;
    assert_eq!(states, b.states(&h).await);
    let expected_states = state_rows(&[
        ("CONFIRMED", &["CONFIRMED"]),
        ("RESERVED", &[]),
        ("CANCELLED", &[]),
        ("CANCELLED", &["CANCELLED"]),
        ("CONFIRMED", &["CONFIRMED"]),
        ("CANCELLED", &["CANCELLED"]),
        ("CANCELLED", &[]),
        ("EXPIRED", &[]),
        ("EXPIRED", &[]),
    ]);
    assert_eq!(states, expected_states);
    if let Said::Ok(_, r) = &replies[16] {
        let orders = order_rows(&h, a.fresh[3]).await;
        assert_eq!(
            r.order_id,
            Some(orders[0].0),
            "confirmed then cancelled in one batch keeps its order id"
        );
    }
    for w in [&a, &b] {
        assert_eq!(unit_states(&h.admin, w.product).await, (6, 1, 2));
    }
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());

    // The same batch again changes nothing.
    let before = snapshot(&h.admin).await;
    let again = batch(&svc, &ops).await;
    assert_eq!(snapshot(&h.admin).await, before);
    for (op, r) in ops.iter().zip(&again) {
        assert_eq!(r, &single(&svc, *op).await, "{op:?}");
    }
    h.stop().await;
}

/// A small deterministic generator: the interleavings vary by round, the test does not
/// depend on an outside crate.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batches_single_calls_and_the_sweep_race_to_one_outcome_each() {
    const ROUNDS: u64 = 3;
    const N: usize = 30;
    const BATCHES: usize = 4;
    let h = Harness::start().await;
    let pool = h.service_pool().await;
    let mut finals: HashMap<String, usize> = HashMap::new();

    for round in 0..ROUNDS {
        let product = h.product(N as i64).await;
        let rs = h.reserve_many(product.id, N, &format!("r{round}")).await;
        let ids: Vec<Uuid> = rs.iter().map(|r| r.id).collect();
        h.scatter_deadlines(product.id).await;

        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (round + 1));
        let batches: Vec<Vec<OrderOp>> = (0..BATCHES)
            .map(|_| {
                let mut order = ids.clone();
                for i in (1..order.len()).rev() {
                    order.swap(i, rng.below(i + 1));
                }
                // Some ids twice, so repeats inside one batch race too.
                order.extend((0..5).map(|_| ids[rng.below(N)]));
                order
                    .into_iter()
                    .map(|id| match rng.below(10) {
                        0..=5 => confirm(id),
                        6 | 7 => cancel(id),
                        _ => lookup(id),
                    })
                    .collect()
            })
            .collect();

        let svc = h.service();
        let batch_runs = join_all(batches.iter().map(|ops| {
            let svc = svc.clone();
            async move { (ops.clone(), batch(&svc, ops).await) }
        }));
        let single_runs = join_all(rs.iter().enumerate().map(|(i, r)| {
            let svc = svc.clone();
            let buyer = h.buyer(r.member_id.as_str());
            let id = r.id;
            async move {
                let mut out = vec![(confirm(id), single(&svc, confirm(id)).await)];
                if i % 3 == 0 {
                    out.push((cancel(id), single(&svc, cancel(id)).await));
                }
                if i % 4 == 1 {
                    // The buyer's own cancel: a paid reservation is refused, not undone.
                    let said = said(buyer.cancel(id).await);
                    if !matches!(&said, Said::No(409, e) if e.code == "RESERVATION_CONFIRMED") {
                        out.push((cancel(id), said));
                    }
                }
                out
            }
        }));
        let sweeps = async {
            let (a, b) = tokio::join!(
                order::sweep::sweep(&pool, 5, 100),
                order::sweep::sweep(&pool, 5, 100)
            );
            a.expect("sweep") + b.expect("sweep")
        };
        let (batch_answers, single_answers, _swept) = tokio::join!(batch_runs, single_runs, sweeps);

        // Every answer, by reservation: a 5xx (a deadlock among them) would have
        // failed `batch` or `said` already.
        let mut answers: HashMap<Uuid, Vec<(OrderOp, Said)>> = HashMap::new();
        for (ops, replies) in batch_answers {
            for (op, said) in ops.into_iter().zip(replies) {
                answers.entry(id_of(&op)).or_default().push((op, said));
            }
        }
        for (op, said) in single_answers.into_iter().flatten() {
            answers.entry(id_of(&op)).or_default().push((op, said));
        }

        for id in &ids {
            let state = reservation_state(&h.admin, *id).await;
            *finals.entry(state.clone()).or_default() += 1;
            assert_ne!(
                state, "RESERVED",
                "every reservation was confirmed at least once"
            );
            let orders = order_rows(&h, *id).await;
            assert!(orders.len() <= 1, "{id}: {orders:?}");
            let mut order_ids = Vec::new();
            for (op, said) in &answers[id] {
                match (op, said) {
                    (OrderOp::Confirm { .. }, Said::Ok(200, r)) => {
                        assert_eq!(r.state, ReservationState::Confirmed);
                        order_ids.push(r.order_id.expect("a confirmed one has its order"));
                    }
                    (OrderOp::Confirm { .. }, Said::No(409, e)) => {
                        let expect = match e.code.as_str() {
                            "RESERVATION_EXPIRED" => "EXPIRED",
                            "RESERVATION_CANCELLED" => "CANCELLED",
                            other => panic!("confirm refused with {other}"),
                        };
                        assert_eq!(state, expect, "{id}: a refusal that did not stick");
                    }
                    (OrderOp::Cancel { .. }, Said::Ok(200, r)) => {
                        assert_ne!(r.state, ReservationState::Reserved);
                        assert_ne!(r.state, ReservationState::Confirmed);
                        assert_eq!(r.state.to_string(), state, "{id}: cancel's answer");
                        order_ids.extend(r.order_id);
                    }
                    (OrderOp::Reservation { .. }, Said::Ok(200, r)) => {
                        order_ids.extend(r.order_id);
                    }
                    other => panic!("{id}: unexpected answer {other:?}"),
                }
            }
            order_ids.sort();
            order_ids.dedup();
            match state.as_str() {
                "CONFIRMED" => {
                    assert_eq!(
                        order_ids.len(),
                        1,
                        "{id}: one order, every answer naming it"
                    );
                    assert_eq!(orders, vec![(order_ids[0], "CONFIRMED".to_owned())]);
                }
                "CANCELLED" => {
                    // Cancelled before or after a confirm (a service may undo a sale).
                    assert!(order_ids.len() <= 1, "{id}: {order_ids:?}");
                    let stored: Vec<Uuid> = orders.iter().map(|o| o.0).collect();
                    assert_eq!(stored, order_ids, "{id}");
                    assert!(
                        orders.iter().all(|o| o.1 == "CANCELLED"),
                        "{id}: {orders:?}"
                    );
                }
                "EXPIRED" => {
                    assert!(
                        order_ids.is_empty() && orders.is_empty(),
                        "{id}: sold then expired"
                    );
                }
                other => panic!("{id}: {other}"),
            }
        }
        let (available, reserved, sold) = unit_states(&h.admin, product.id).await;
        assert_eq!(reserved, 0);
        assert_eq!(available + sold, N as i64, "never more sold than the stock");
        assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());
    }
    println!("final states over {ROUNDS} rounds: {finals:?}");
    h.stop().await;
}

#[tokio::test]
async fn empty_and_oversized_batches_are_refused_whole() {
    let (h, _, r) = Harness::with_reservation(1).await;
    let svc = h.service();
    let before = snapshot(&h.admin).await;

    for n in [0, MAX_OPS + 1] {
        let ops = vec![confirm(r.id); n];
        let e = svc.batch(&OrderBatch::new(ops)).await.unwrap_err();
        assert_eq!(
            (e.status(), e.code()),
            (Some(400), Some("BATCH_TOO_LARGE")),
            "{n} ops"
        );
    }
    assert_eq!(snapshot(&h.admin).await, before);

    // The largest batch fits the route's body limit and is answered op by op.
    let mut ops = vec![lookup(Uuid::new_v4()); MAX_OPS - 1];
    ops.push(confirm(r.id));
    let replies = batch(&svc, &ops).await;
    assert!(replies[..MAX_OPS - 1]
        .iter()
        .all(|s| s.shape() == (404, "RESERVATION_NOT_FOUND".to_owned())));
    assert_eq!(replies[MAX_OPS - 1].shape(), (200, "CONFIRMED".to_owned()));
    h.stop().await;
}

#[tokio::test]
async fn a_buyer_token_is_forbidden() {
    let (h, product, r) = Harness::with_reservation(1).await;
    let e = h
        .buyer("alice")
        .batch(&OrderBatch::new(vec![confirm(r.id), cancel(r.id)]))
        .await
        .unwrap_err();
    refused(&e, 403, "FORBIDDEN");
    assert_eq!(reservation_state(&h.admin, r.id).await, "RESERVED");
    assert_eq!(unit_states(&h.admin, product.id).await, (0, 1, 0));
    h.stop().await;
}

#[tokio::test]
async fn a_broken_invariant_fails_the_whole_batch_and_writes_nothing() {
    let (h, _, rs) = Harness::with_reserved(2, "m").await;
    let svc = h.service();
    // The second reservation's unit no longer agrees with it: its confirm cannot be
    // applied, and neither may the first one's, which is in the same transaction.
    h.break_unit(rs[1].unit_id, "AVAILABLE").await;
    let before = snapshot(&h.admin).await;
    let e = svc
        .batch(&OrderBatch::new(vec![confirm(rs[0].id), confirm(rs[1].id)]))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(500), "{e}");
    assert_eq!(snapshot(&h.admin).await, before);
    assert_eq!(reservation_state(&h.admin, rs[0].id).await, "RESERVED");
    // Alone, the sound one still confirms.
    let replies = batch(&svc, &[confirm(rs[0].id)]).await;
    assert_eq!(replies[0].shape(), (200, "CONFIRMED".to_owned()));
    h.stop().await;
}
