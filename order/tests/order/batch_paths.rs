//! The two ways a batch is applied, the one statement and the general transaction,
//! give the same answers and leave the same tables; the one statement refuses what it
//! cannot do (a refund) without writing, and fails whole on a broken invariant. An
//! ignored benchmark prints what each costs per batch.

use std::time::{Duration, Instant};

use crate::support::{inconsistencies, reservation_state, snapshot, unit_states, Harness};
use paysaga_contracts::{
    batch::Reply,
    order::api::{OrderOp, Reservation},
};
use sqlx::PgPool;
use uuid::Uuid;

fn confirm(id: Uuid) -> OrderOp {
    OrderOp::Confirm { reservation_id: id }
}
fn cancel(id: Uuid) -> OrderOp {
    OrderOp::Cancel { reservation_id: id }
}

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

/// Every state a confirm or a cancel can meet, each reservation named once.
struct World {
    product: i64,
    named: Vec<Uuid>,
    ops: Vec<OrderOp>,
}

impl World {
    async fn build(h: &Harness, tag: &str) -> World {
        let svc = h.service();
        let product = h.product(11).await;
        let rs: Vec<Uuid> = h
            .reserve_many(product.id, 11, tag)
            .await
            .into_iter()
            .map(|r| r.id)
            .collect();
        svc.confirm(rs[4]).await.unwrap();
        svc.cancel(rs[5]).await.unwrap();
        svc.cancel(rs[10]).await.unwrap();
        h.make_due(rs[6]).await;
        // Expired by its confirm (409), which is all this call is for.
        let _ = svc.confirm(rs[6]).await;
        h.make_due(rs[7]).await;
        h.make_due(rs[8]).await;
        let ops = vec![
            confirm(rs[0]),
            cancel(rs[1]),
            confirm(rs[4]), // already confirmed: the same reservation
            confirm(rs[5]), // cancelled: 409
            confirm(rs[6]), // expired: 409
            confirm(rs[7]), // due: expired here, 409
            cancel(rs[8]),  // due: expired here, 200 EXPIRED
            cancel(rs[10]), // cancelled: 200 unchanged
            confirm(Uuid::now_v7()),
            confirm(rs[2]),
            cancel(Uuid::now_v7()),
            confirm(rs[3]),
            cancel(rs[9]),
        ];
        World {
            product: product.id,
            named: rs,
            ops,
        }
    }

    /// Each reservation's state and its orders' states, in build order.
    async fn tables(&self, h: &Harness) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for id in &self.named {
            let orders: Vec<String> = sqlx::query_scalar(
                r#"SELECT state FROM order_service.orders WHERE reservation_id = $1"#,
            )
            .bind(id)
            .fetch_all(&h.admin)
            .await
            .unwrap();
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

#[tokio::test]
async fn the_one_statement_and_the_general_path_agree() {
    let h = Harness::start().await;
    let pool = h.service_pool().await;
    let a = World::build(&h, "a").await;
    let b = World::build(&h, "b").await;

    let fast = order::batch::apply_fast(&pool, &a.ops)
        .await
        .expect("one statement")
        .expect("a batch the one statement takes");
    let general = order::batch::apply_general(&pool, &b.ops)
        .await
        .expect("general path");

    let shapes: Vec<_> = fast.iter().map(shape).collect();
    assert_eq!(shapes, general.iter().map(shape).collect::<Vec<_>>());
    let expected: Vec<(u16, &str, bool)> = vec![
        (200, "CONFIRMED", true),
        (200, "CANCELLED", false),
        (200, "CONFIRMED", true),
        (409, "RESERVATION_CANCELLED", false),
        (409, "RESERVATION_EXPIRED", false),
        (409, "RESERVATION_EXPIRED", false),
        (200, "EXPIRED", false),
        (200, "CANCELLED", false),
        (404, "RESERVATION_NOT_FOUND", false),
        (200, "CONFIRMED", true),
        (404, "RESERVATION_NOT_FOUND", false),
        (200, "CONFIRMED", true),
        (200, "CANCELLED", false),
    ];
    let expected: Vec<(u16, String, bool)> = expected
        .into_iter()
        .map(|(s, c, o)| (s, c.to_owned(), o))
        .collect();
    assert_eq!(shapes, expected);
    // Whole error bodies agree too (codes and messages).
    for (f, g) in fast.iter().zip(&general) {
        if f.status != 200 {
            assert_eq!(f, g);
        }
    }
    bodies_are_stored_rows(&h, &fast).await;
    bodies_are_stored_rows(&h, &general).await;

    let tables = a.tables(&h).await;
    assert_eq!(tables, b.tables(&h).await);
    let expected: Vec<(&str, Vec<&str>)> = vec![
        ("CONFIRMED", vec!["CONFIRMED"]),
        ("CANCELLED", vec![]),
        ("CONFIRMED", vec!["CONFIRMED"]),
        ("CONFIRMED", vec!["CONFIRMED"]),
        ("CONFIRMED", vec!["CONFIRMED"]),
        ("CANCELLED", vec![]),
        ("EXPIRED", vec![]),
        ("EXPIRED", vec![]),
        ("EXPIRED", vec![]),
        ("CANCELLED", vec![]),
        ("CANCELLED", vec![]),
    ];
    let expected: Vec<(String, Vec<String>)> = expected
        .into_iter()
        .map(|(s, o)| (s.to_owned(), o.into_iter().map(str::to_owned).collect()))
        .collect();
    assert_eq!(tables, expected);
    assert_eq!(unit_states(&h.admin, a.product).await, (7, 0, 4));
    assert_eq!(unit_states(&h.admin, b.product).await, (7, 0, 4));
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());

    // Again, each through the other path: nothing changes and the answers repeat.
    let before = snapshot(&h.admin).await;
    let a_again = order::batch::apply_general(&pool, &a.ops).await.unwrap();
    let b_again = order::batch::apply_fast(&pool, &b.ops)
        .await
        .unwrap()
        .expect("taken");
    assert_eq!(snapshot(&h.admin).await, before);
    assert_eq!(a_again, fast);
    assert_eq!(b_again, general);
    h.stop().await;
}

/// Lookups beside confirms and cancels of other reservations (the orchestrator's usual
/// batch) are answered by a plain read next to the one statement: the same answers and
/// the same tables as the general path gives a twin world.
#[tokio::test]
async fn lookups_beside_writes_agree_with_the_general_path() {
    let h = Harness::start().await;
    let pool = h.service_pool().await;
    let a = World::build(&h, "la").await;
    let b = World::build(&h, "lb").await;
    let mixed = |w: &World| -> Vec<OrderOp> {
        let mut ops = w.ops.clone();
        // Lookups of reservations no write names: a confirmed one, a reserved one, a
        // cancelled one; and of one that does not exist.
        ops.insert(
            1,
            OrderOp::Reservation {
                reservation_id: w.named[4],
            },
        );
        ops.insert(
            4,
            OrderOp::Reservation {
                reservation_id: w.named[10],
            },
        );
        ops.push(OrderOp::Reservation {
            reservation_id: Uuid::now_v7(),
        });
        ops.push(OrderOp::Reservation {
            reservation_id: w.named[5],
        });
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
    let orders = || async {
        sqlx::query_scalar::<_, i64>(r#"SELECT COUNT(*) FROM order_service.orders"#)
            .fetch_one(&h.admin)
            .await
            .unwrap()
    };
    let before = orders().await;
    let split = order::batch::apply(&pool, &a_ops)
        .await
        .expect("split batch");
    let general = order::batch::apply_general(&pool, &b_ops)
        .await
        .expect("general path");
    assert_eq!(
        split.iter().map(shape).collect::<Vec<_>>(),
        general.iter().map(shape).collect::<Vec<_>>()
    );
    assert_eq!(split[1].status, 200, "a lookup of a confirmed reservation");
    assert_eq!(split[split.len() - 2].status, 404, "a lookup of nothing");
    for (f, g) in split.iter().zip(&general) {
        if f.status != 200 {
            assert_eq!(f, g);
        }
    }
    bodies_are_stored_rows(&h, &split).await;
    assert_eq!(a.tables(&h).await, b.tables(&h).await);
    assert_eq!(
        unit_states(&h.admin, a.product).await,
        unit_states(&h.admin, b.product).await
    );
    // Three confirms of reserved units in each world became orders.
    assert_eq!(orders().await, before + 6);
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());
    h.stop().await;
}

#[tokio::test]
async fn a_refund_is_left_to_the_general_path() {
    let h = Harness::start().await;
    let pool = h.service_pool().await;
    let product = h.product(2).await;
    let rs = h.reserve_many(product.id, 2, "m").await;
    h.service().confirm(rs[1].id).await.unwrap();
    let ops = vec![confirm(rs[0].id), cancel(rs[1].id)];

    let before = snapshot(&h.admin).await;
    assert!(order::batch::apply_fast(&pool, &ops)
        .await
        .unwrap()
        .is_none());
    assert_eq!(snapshot(&h.admin).await, before, "nothing written");

    // The batch as sent: the general path takes it.
    let replies = order::batch::apply(&pool, &ops).await.unwrap();
    let shapes: Vec<_> = replies.iter().map(shape).collect();
    assert_eq!(
        shapes,
        vec![
            (200, "CONFIRMED".to_owned(), true),
            (200, "CANCELLED".to_owned(), true)
        ]
    );
    assert_eq!(unit_states(&h.admin, product.id).await, (1, 0, 1));
    let orders: Vec<String> =
        sqlx::query_scalar(r#"SELECT state FROM order_service.orders WHERE reservation_id = $1"#)
            .bind(rs[1].id)
            .fetch_all(&h.admin)
            .await
            .unwrap();
    assert_eq!(orders, vec!["CANCELLED".to_owned()]);
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());
    h.stop().await;
}

#[tokio::test]
async fn the_one_statement_fails_whole_on_a_broken_unit() {
    let h = Harness::start().await;
    let pool = h.service_pool().await;
    let product = h.product(3).await;
    let rs = h.reserve_many(product.id, 3, "m").await;
    sqlx::query(r#"UPDATE order_service.product_stock SET state = 'SOLD' WHERE id = $1"#)
        .bind(rs[2].unit_id)
        .execute(&h.admin)
        .await
        .unwrap();
    let before = snapshot(&h.admin).await;
    let ops = vec![confirm(rs[0].id), cancel(rs[1].id), confirm(rs[2].id)];
    match order::batch::apply_fast(&pool, &ops).await {
        Err(order::Error::Invariant(why)) => {
            assert!(why.contains("invariant breach"), "{why}")
        }
        Err(e) => panic!("not the invariant breach: {e:?}"),
        Ok(r) => panic!("applied: {r:?}"),
    }
    assert_eq!(snapshot(&h.admin).await, before, "nothing written");
    // The failed statement's locks are gone: the sound ones apply at once.
    let replies = tokio::time::timeout(
        Duration::from_secs(5),
        order::batch::apply(&pool, &ops[..2]),
    )
    .await
    .expect("no lock left behind")
    .unwrap();
    assert_eq!(
        replies.iter().map(shape).collect::<Vec<_>>(),
        vec![
            (200, "CONFIRMED".to_owned(), true),
            (200, "CANCELLED".to_owned(), false)
        ]
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

/// Prints time and PostgreSQL CPU per batch of the two paths (no timed assertion:
/// machines are noisy), and checks what both paths wrote. `BATCH_PATHS_BATCHES` sets
/// the batches per path (default 40; 400 for steadier figures).
#[tokio::test]
async fn time_per_batch() {
    let batches: usize = std::env::var("BATCH_PATHS_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    const ROUNDS: usize = 1;
    const SIZE: usize = 5;
    let h = Harness::start().await;
    // One connection: every statement on one backend, whose CPU time is read from /proc.
    let pool = paysaga_common::db::connect(&h.db.role_url("order_app"), order::SCHEMA, 1)
        .await
        .unwrap();
    for round in 0..ROUNDS {
        for (name, fast) in [("general (before)", false), ("one statement", true)] {
            let ids = seed(&h, (batches * SIZE) as i64).await;
            let cpu0 = backend_cpu(&pool).await;
            let start = Instant::now();
            for chunk in ids.chunks(SIZE) {
                let ops: Vec<OrderOp> = chunk.iter().map(|id| confirm(*id)).collect();
                let replies = if fast {
                    order::batch::apply_fast(&pool, &ops)
                        .await
                        .unwrap()
                        .unwrap()
                } else {
                    order::batch::apply_general(&pool, &ops).await.unwrap()
                };
                assert!(replies.iter().all(|r| r.status == 200));
            }
            let wall = start.elapsed().as_secs_f64() / batches as f64;
            let cpu = match (cpu0, backend_cpu(&pool).await) {
                (Some(a), Some(b)) => format!("{:.3} ms", (b - a) * 1e3 / batches as f64),
                _ => "unknown".to_owned(),
            };
            eprintln!(
                "round {round}: {name}: {batches} batches of {SIZE} confirms: {:.3} ms a batch, PostgreSQL CPU {cpu} a batch",
                wall * 1e3
            );
        }
    }

    // Claims: what a flush of several claims no longer pays (BEGIN and COMMIT around its
    // statement), next to the flush itself.
    let product = h.product((batches * SIZE) as i64).await;
    let cpu0 = backend_cpu(&pool).await;
    let start = Instant::now();
    for i in 0..batches {
        let claims: Vec<order::claims::NewClaim> = (0..SIZE)
            .map(|k| order::claims::NewClaim {
                product_id: product.id,
                member: paysaga_common::auth::MemberId::parse(format!("c-{i}-{k}")).unwrap(),
                pass_id: Uuid::now_v7(),
                ttl: Duration::from_secs(600),
                cap: 1,
            })
            .collect();
        order::claims::claim_many(&pool, &claims).await.unwrap();
    }
    let flush = start.elapsed().as_secs_f64() * 1e3 / batches as f64;
    let flush_cpu = backend_cpu(&pool).await;
    let start = Instant::now();
    for _ in 0..batches {
        let tx = pool.begin().await.unwrap();
        tx.commit().await.unwrap();
    }
    let pair = start.elapsed().as_secs_f64() * 1e3 / batches as f64;
    let pair_cpu = backend_cpu(&pool).await;
    let per = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.3} ms", (b - a) * 1e3 / batches as f64),
        _ => "unknown".to_owned(),
    };
    eprintln!(
        "claims: a flush of {SIZE} in autocommit {flush:.3} ms (PostgreSQL CPU {}); the BEGIN + COMMIT it no longer pays {pair:.3} ms (PostgreSQL CPU {})",
        per(cpu0, flush_cpu),
        per(flush_cpu, pair_cpu)
    );
    // What the two paths wrote: every confirm sold its unit and made its order, every
    // claim reserved a unit, and the tables agree with each other.
    let (sold, orders): (i64, i64) = sqlx::query_as(
        r#"SELECT (SELECT COUNT(*) FROM order_service.product_stock WHERE state = 'SOLD'),
                  (SELECT COUNT(*) FROM order_service.orders)"#,
    )
    .fetch_one(&h.admin)
    .await
    .unwrap();
    let confirmed = (2 * ROUNDS * batches * SIZE) as i64;
    assert_eq!((sold, orders), (confirmed, confirmed));
    let (_, reserved, _) = unit_states(&h.admin, product.id).await;
    assert_eq!(reserved, (batches * SIZE) as i64);
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());
    h.stop().await;
}
