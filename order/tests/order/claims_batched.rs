//! Group commit of claims through the real router: concurrent buyers share flushes and
//! still each get the answer their claim alone gets; one claim never fails the others;
//! stock, passes and units read from PostgreSQL. The tests here read process-wide
//! metrics, so they run one at a time.

use std::{collections::HashMap, time::Duration};

use crate::support::{
    all_by, claims, inconsistencies, live_spread, metric, pass, signer, unit_states, Harness,
};
use futures::future::join_all;
use paysaga_common::client::{Answer, CallError};
use paysaga_contracts::order::api::{Reservation, ReservationState};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const FLUSHES: &str = r#"paysaga_batch_ops_count{batch="claims"}"#;
const FLUSHED: &str = r#"paysaga_batch_ops_sum{batch="claims"}"#;
const WAITING: &str = "order_claims_waiting";
const FLUSH_ERRORS: &str = "order_claim_flush_errors_total";

type Reply = Result<Answer<Reservation>, CallError>;

fn no_sweep(c: &mut order::Config) {
    c.sweep_interval = Duration::from_secs(3600);
}

/// A harness for a test that reads the process-wide metrics, once no other such test
/// runs: it has the floor while the guard lives.
async fn alone(
    tweak: impl FnOnce(&mut order::Config),
) -> (tokio::sync::MutexGuard<'static, ()>, Harness) {
    let serial = SERIAL.lock().await;
    (serial, Harness::start_with(tweak).await)
}

/// No sweep, and one claim flush at a time.
fn one_flush(c: &mut order::Config) {
    no_sweep(c);
    c.claim_flushes = 1;
}

/// The answer as the buyer sees it: status and, for a refusal, its code.
fn seen(r: &Reply) -> (u16, Option<String>) {
    match r {
        Ok(a) => (a.status, None),
        Err(e) => (e.status().unwrap_or(0), e.code().map(ToOwned::to_owned)),
    }
}

/// Series values from two scrapes: how much each moved in between.
fn moved(before: &str, after: &str, series: &str) -> f64 {
    metric(after, series) - metric(before, series)
}

/// Flushes, claims flushed and failed flushes between two scrapes.
fn flush_moves(before: &str, after: &str) -> (f64, f64, f64) {
    (
        moved(before, after, FLUSHES),
        moved(before, after, FLUSHED),
        moved(before, after, FLUSH_ERRORS),
    )
}

/// The ids of the reservations stored for pass `pid`.
async fn pass_reservations(h: &Harness, pid: Uuid) -> Vec<Uuid> {
    all_by(
        &h.admin,
        r#"SELECT id FROM order_service.reservations WHERE pass_id = $1"#,
        pid,
    )
    .await
}

/// The answers of fired claims, in the order they were fired.
async fn replies(pending: Vec<tokio::task::JoinHandle<Reply>>) -> Vec<Reply> {
    join_all(pending)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect()
}

/// The answers of fired claims, then what the flushes did since the scrape `before`
/// (see [`flush_moves`]).
async fn replies_and_flushes(
    h: &Harness,
    pending: Vec<tokio::task::JoinHandle<Reply>>,
    before: &str,
) -> (Vec<Reply>, (f64, f64, f64)) {
    let got = replies(pending).await;
    (got, flush_moves(before, &h.metrics().await))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_hundred_buyers_for_one_hundred_units_share_flushes() {
    let (_serial, h) = alone(no_sweep).await;
    let product = h.product(100).await;
    let members: Vec<String> = (0..300).map(|i| format!("buyer-{i}")).collect();
    h.fund(&members).await;
    let before = h.metrics().await;

    let results = h.reserve_all(product.id, &members).await;
    let after = h.metrics().await;

    let mut created = Vec::new();
    let mut sold_out = 0;
    for r in &results {
        match seen(r) {
            (201, None) => created.push(r.as_ref().unwrap().body.clone()),
            (409, Some(code)) if code == "SOLD_OUT" => sold_out += 1,
            other => panic!("unexpected answer {other:?}: {r:?}"),
        }
    }
    assert_eq!((created.len(), sold_out), (100, 200));

    assert_eq!(unit_states(&h.admin, product.id).await, (0, 100, 0));
    assert_eq!(live_spread(&h.admin, product.id).await, (100, 100, 100));
    let mut answered: Vec<Uuid> = created.iter().map(|r| r.id).collect();
    answered.sort_unstable();
    let stored: Vec<Uuid> = all_by(
        &h.admin,
        r#"SELECT id FROM order_service.reservations WHERE product_id = $1 ORDER BY id"#,
        product.id,
    )
    .await;
    assert_eq!(
        answered, stored,
        "every 201 is a stored reservation and no other"
    );
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());

    // Shared flushes, seen from the tables: rows inserted by one transaction carry its
    // one `now()` as created_at, so one claim per transaction would give 100 values.
    let per_commit: Vec<i64> = sqlx::query_scalar(
        r#"
        SELECT COUNT(*) FROM order_service.reservations
        WHERE product_id = $1
        GROUP BY created_at
        ORDER BY COUNT(*) DESC
        "#,
    )
    .bind(product.id)
    .fetch_all(&h.admin)
    .await
    .unwrap();
    println!("reservations per commit: {per_commit:?}");
    assert!(
        per_commit.len() < 100 && per_commit[0] > 1,
        "100 reservations in {} commits",
        per_commit.len()
    );
    // And from the batcher: every buyer's claim went through it, in fewer flushes.
    let (flushes, flushed, failed) = flush_moves(&before, &after);
    println!("{flushed} claims in {flushes} flushes");
    assert!(flushed >= 300.0, "only {flushed} claims were flushed");
    assert!(flushes < flushed, "{flushed} claims took {flushes} flushes");
    assert_eq!(failed, 0.0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_replays_of_a_pass_get_its_one_reservation() {
    let (_serial, h) = alone(no_sweep).await;
    let before = h.metrics().await;

    // One pass sent fifty times at once: one reservation, one unit.
    let product = h.product(10).await;
    let c = claims(product.id, "alice");
    let token = signer().sign(&c);
    h.fund(&["alice"]).await;
    let results = join_all((0..50).map(|_| {
        let client = h.buyer("alice");
        let token = token.clone();
        async move { client.reserve(product.id, &token).await }
    }))
    .await;
    let answers: Vec<Answer<Reservation>> = results
        .into_iter()
        .map(|r| r.expect("a replay is never refused"))
        .collect();
    assert_eq!(answers.iter().filter(|a| a.status == 201).count(), 1);
    assert!(answers.iter().all(|a| a.status == 201 || a.status == 200));
    assert!(answers.iter().all(|a| a.body == answers[0].body));
    assert_eq!(pass_reservations(&h, c.pid).await, vec![answers[0].body.id]);
    // No unit stays RESERVED for a claim that lost its pass.
    assert_eq!(unit_states(&h.admin, product.id).await, (9, 1, 0));

    // Twenty passes, five copies of each at once, for ten units: each pass that got a
    // unit has one reservation and one 201, its copies answer the same one, and the
    // passes that did not are SOLD_OUT.
    let product = h.product(10).await;
    let passes: Vec<(String, Uuid, String)> = (0..20)
        .map(|i| {
            let member = format!("m{i}");
            let c = claims(product.id, &member);
            let token = signer().sign(&c);
            (member, c.pid, token)
        })
        .collect();
    let members: Vec<&str> = passes.iter().map(|(m, _, _)| m.as_str()).collect();
    h.fund(&members).await;
    let calls = passes.iter().flat_map(|(member, pid, token)| {
        (0..5).map(|_| {
            let client = h.buyer(member);
            let token = token.clone();
            let pid = *pid;
            async move { (pid, client.reserve(product.id, &token).await) }
        })
    });
    let mut by_pass: HashMap<Uuid, Vec<Reply>> = HashMap::new();
    for (pid, r) in join_all(calls).await {
        by_pass.entry(pid).or_default().push(r);
    }
    let mut reserved = 0;
    for (pid, replies) in &by_pass {
        let ids: Vec<Uuid> = replies
            .iter()
            .filter_map(|r| r.as_ref().ok().map(|a| a.body.id))
            .collect();
        for r in replies {
            let s = seen(r);
            assert!(
                matches!(s, (200 | 201, None)) || s == (409, Some("SOLD_OUT".into())),
                "pass {pid}: unexpected {r:?}"
            );
        }
        let rows = pass_reservations(&h, *pid).await;
        if ids.is_empty() {
            assert!(
                rows.is_empty(),
                "pass {pid} answered SOLD_OUT but holds {rows:?}"
            );
            continue;
        }
        reserved += 1;
        assert_eq!(rows.len(), 1, "pass {pid}");
        assert!(ids.iter().all(|id| *id == rows[0]), "pass {pid}: {ids:?}");
        let fresh = replies
            .iter()
            .filter(|r| matches!(r, Ok(a) if a.status == 201))
            .count();
        assert_eq!(fresh, 1, "pass {pid}: one 201");
    }
    assert_eq!(reserved, 10);
    assert_eq!(unit_states(&h.admin, product.id).await, (0, 10, 0));
    let after = h.metrics().await;
    assert_eq!(moved(&before, &after, FLUSH_ERRORS), 0.0, "no flush failed");
    h.stop_consistent().await;
}

/// One buyer's request in the mixed flush.
struct Request {
    what: &'static str,
    member: String,
    product_id: i64,
    token: String,
}

/// The same world in each service: product A with stock, product B sold out (no
/// units), a pass of A already used by `m-old`; then the requests of one flush.
struct Mixed {
    old: Reservation,
    requests: Vec<Request>,
    /// Requests that reach the claim (the others are answered before it).
    claiming: usize,
}

async fn mixed(h: &Harness) -> Mixed {
    let a = h.product(10).await;
    let b = h.product(0).await;
    let old_pass = pass(a.id, "m-old");
    h.fund(&["m-old"]).await;
    let old = h.buyer("m-old").reserve(a.id, &old_pass).await.unwrap();
    assert_eq!(old.status, 201);
    let req = |what, member: &str, product_id, token: String| Request {
        what,
        member: member.to_owned(),
        product_id,
        token,
    };
    let dup = pass(a.id, "d");
    let requests = vec![
        req("new 1", "n1", a.id, pass(a.id, "n1")),
        req("new 2", "n2", a.id, pass(a.id, "n2")),
        req("replay", "m-old", a.id, old_pass.clone()),
        req("copy 1", "d", a.id, dup.clone()),
        req("new 3", "n3", a.id, pass(a.id, "n3")),
        req("copy 2", "d", a.id, dup),
        req("sold out", "s", b.id, pass(b.id, "s")),
        req("no product", "u", 9_999, pass(9_999, "u")),
        req("someone else's pass", "m-other", a.id, old_pass),
    ];
    Mixed {
        old: old.body,
        requests,
        // Not the unknown product's (its price is looked up before any hold), nor the
        // pass of someone else.
        claiming: 7,
    }
}

/// Funds the requests' members, then sends each request in a task of its own.
async fn fire(h: &Harness, requests: &[Request]) -> Vec<tokio::task::JoinHandle<Reply>> {
    let members: Vec<&str> = requests.iter().map(|r| r.member.as_str()).collect();
    h.fund(&members).await;
    requests
        .iter()
        .map(|r| {
            let client = h.buyer(&r.member);
            let (product_id, token) = (r.product_id, r.token.clone());
            tokio::spawn(async move { client.reserve(product_id, &token).await })
        })
        .collect()
}

/// Holds the only claim flush in flight inside PostgreSQL: an uncommitted reservation
/// row with a pass, then a buyer claiming with that pass, whose insert must wait to
/// learn whether the row commits. Claims sent meanwhile queue for the next flush.
/// Rolling back the returned transaction lets the claim through (201).
struct Held {
    tx: Transaction<'static, Postgres>,
    claim: tokio::task::JoinHandle<Reply>,
}

async fn hold_flush(h: &Harness) -> Held {
    let claimed = h.product(1).await;
    let c = claims(claimed.id, "holder");
    h.fund(&["holder"]).await;
    let tx = hold_pass(h, "holder", c.pid).await;
    let client = h.buyer("holder");
    let token = signer().sign(&c);
    let claim = tokio::spawn(async move { client.reserve(claimed.id, &token).await });
    wait_blocked(h).await;
    Held { tx, claim }
}

/// A reservation of `member` with `pass_id`, inserted by a transaction left open (the
/// one returned): with `live_of`, a reservation of that product live for an hour, else
/// a CANCELLED one. Either is on the unit of a spare product of its own: a row
/// referencing a unit that claims look at would key-share lock it, and they would skip
/// the unit instead of waiting.
async fn uncommitted_reservation(
    h: &Harness,
    member: &str,
    pass_id: Uuid,
    live_of: Option<i64>,
) -> Transaction<'static, Postgres> {
    let spare = h.product(1).await;
    let (product_id, state, lasts_secs) = match live_of {
        Some(product_id) => (product_id, "RESERVED", 3600),
        None => (spare.id, "CANCELLED", 0),
    };
    let mut tx = h.admin.begin().await.unwrap();
    sqlx::query(
        r#"
        INSERT INTO order_service.reservations (id, product_id, unit_id, member_id, pass_id, price, state, expires_at)
        SELECT $1, $2, s.id, $3, $4, 1, $5, now() + $6 * INTERVAL '1 second'
        FROM order_service.product_stock s
        WHERE s.product_id = $7
        "#,
    )
    .bind(Uuid::now_v7())
    .bind(product_id)
    .bind(member)
    .bind(pass_id)
    .bind(state)
    .bind(lasts_secs)
    .bind(spare.id)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx
}

/// An uncommitted reservation of `member` with `pass_id`: a claim with that pass waits
/// in PostgreSQL until the returned transaction ends.
async fn hold_pass(h: &Harness, member: &str, pass_id: Uuid) -> Transaction<'static, Postgres> {
    uncommitted_reservation(h, member, pass_id, None).await
}

/// Until one of the service's statements waits on another transaction.
async fn wait_blocked(h: &Harness) {
    wait_for("a claim to wait on a held pass", || async {
        let waiting = h
            .count(
                r#"
            SELECT COUNT(*) FROM pg_stat_activity
            WHERE datname = current_database() AND usename = 'order_app'
              AND wait_event_type = 'Lock' AND wait_event = 'transactionid'
            "#,
            )
            .await;
        waiting == 1
    })
    .await;
}

async fn wait_for<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    // A bound so a broken setup fails instead of hanging; nothing is asserted on time.
    for _ in 0..1_000 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("gave up waiting for {what}");
}

async fn wait_for_waiting(h: &Harness, n: usize) {
    wait_for(&format!("{n} claims waiting"), || async {
        metric(&h.metrics().await, WAITING) == n as f64
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mixed_flush_answers_each_request_as_its_claim_alone() {
    let _serial = SERIAL.lock().await;

    // Each claim alone: group commit off, every claim its own statement (a claim of one).
    let single = Harness::start_with(|c| {
        no_sweep(c);
        c.claim_batch = 1;
    })
    .await;
    let twin = mixed(&single).await;
    let expected = replies(fire(&single, &twin.requests).await).await;

    // Grouped, with every claim of the scenario in one flush: the only flush slot is
    // held while they queue behind it.
    let h = Harness::start_with(one_flush).await;
    let world = mixed(&h).await;
    let before = h.metrics().await;
    let held = hold_flush(&h).await;
    let pending = fire(&h, &world.requests).await;
    wait_for_waiting(&h, 1 + world.claiming).await;
    held.tx.rollback().await.unwrap();
    let holder = held
        .claim
        .await
        .unwrap()
        .expect("the held claim goes through");
    assert_eq!(holder.status, 201);
    let (got, flushes) = replies_and_flushes(&h, pending, &before).await;
    assert_eq!(
        flushes,
        (2.0, 1.0 + world.claiming as f64, 0.0),
        "the held flush, then one flush with every claim, neither failed"
    );

    // Each answer as the claim alone got it, and as the rules say.
    // Both worlds send the same requests in the same order.
    let at = |what: &str| world.requests.iter().position(|r| r.what == what).unwrap();
    for (i, r) in world.requests.iter().enumerate() {
        // Which of two copies of one pass makes the reservation is a race in both worlds.
        if !r.what.starts_with("copy") {
            assert_eq!(seen(&got[i]), seen(&expected[i]), "{}", r.what);
        }
    }
    let ok = |i: usize| got[i].as_ref().unwrap();
    for what in ["new 1", "new 2", "new 3"] {
        let i = at(what);
        let a = ok(i);
        assert_eq!(a.status, 201, "{what}");
        assert_eq!(
            (a.body.member_id.as_str(), a.body.state),
            (
                world.requests[i].member.as_str(),
                ReservationState::Reserved
            )
        );
    }
    let replay = ok(at("replay"));
    assert_eq!((replay.status, &replay.body), (200, &world.old));
    let (c1, c2) = (ok(at("copy 1")), ok(at("copy 2")));
    let mut statuses = [c1.status, c2.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 201]);
    assert_eq!(c1.body, c2.body);
    let mut twin_statuses = [
        expected[at("copy 1")].as_ref().unwrap().status,
        expected[at("copy 2")].as_ref().unwrap().status,
    ];
    twin_statuses.sort_unstable();
    assert_eq!(twin_statuses, statuses);
    for (what, answer) in [
        ("sold out", (409, Some("SOLD_OUT".to_owned()))),
        ("no product", (404, Some("PRODUCT_NOT_FOUND".to_owned()))),
        (
            "someone else's pass",
            (409, Some("PASS_ALREADY_USED".to_owned())),
        ),
    ] {
        assert_eq!(seen(&got[at(what)]), answer, "{what}");
    }

    // The tables: the four new reservations in one commit, every unit accounted for,
    // and the twin world holding the same.
    let commits: i64 = sqlx::query_scalar(
        r#"
        SELECT COUNT(DISTINCT created_at) FROM order_service.reservations
        WHERE product_id = $1 AND id <> $2
        "#,
    )
    .bind(world.old.product_id)
    .bind(world.old.id)
    .fetch_one(&h.admin)
    .await
    .unwrap();
    assert_eq!(
        commits, 1,
        "the flush's reservations were committed together"
    );
    for w in [&h, &single] {
        assert_eq!(unit_states(&w.admin, world.old.product_id).await, (5, 5, 0));
        assert_eq!(inconsistencies(&w.admin).await, Vec::<String>::new());
    }
    single.stop().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_unit_found_held_fails_its_own_claim_and_no_other() {
    let (_serial, h) = alone(one_flush).await;
    let fine = h.product(5).await;
    let broken = h.product(1).await;
    // A live reservation on a unit still AVAILABLE: a table broken by hand, so a claim
    // of that unit meets reservations_live_unit_unique.
    sqlx::query(
        r#"
        INSERT INTO order_service.reservations (id, product_id, unit_id, member_id, pass_id, price, state, expires_at)
        SELECT $1, s.product_id, s.id, 'ghost', $2, 1, 'RESERVED', now() + INTERVAL '1 hour'
        FROM order_service.product_stock s
        WHERE s.product_id = $3
        "#,
    )
    .bind(Uuid::now_v7())
    .bind(Uuid::new_v4())
    .bind(broken.id)
    .execute(&h.admin)
    .await
    .unwrap();

    let requests = vec![
        Request {
            what: "fine 1",
            member: "f1".into(),
            product_id: fine.id,
            token: pass(fine.id, "f1"),
        },
        Request {
            what: "broken",
            member: "b1".into(),
            product_id: broken.id,
            token: pass(broken.id, "b1"),
        },
        Request {
            what: "fine 2",
            member: "f2".into(),
            product_id: fine.id,
            token: pass(fine.id, "f2"),
        },
    ];
    let before = h.metrics().await;
    let held = hold_flush(&h).await;
    let pending = fire(&h, &requests).await;
    wait_for_waiting(&h, 1 + requests.len()).await;
    held.tx.rollback().await.unwrap();
    assert_eq!(held.claim.await.unwrap().unwrap().status, 201);
    let (got, flushes) = replies_and_flushes(&h, pending, &before).await;

    assert_eq!(
        flushes,
        (2.0, 4.0, 0.0),
        "the three claims rode one flush, which did not fail"
    );
    assert_eq!(seen(&got[0]), (201, None), "{}", requests[0].what);
    assert_eq!(seen(&got[2]), (201, None), "{}", requests[2].what);
    assert_eq!(
        seen(&got[1]).0,
        500,
        "the broken unit fails its own claim only"
    );
    assert_eq!(unit_states(&h.admin, fine.id).await, (3, 2, 0));
    assert_eq!(unit_states(&h.admin, broken.id).await, (1, 0, 0));
    let on_broken = h
        .count_by(
            r#"SELECT COUNT(*) FROM order_service.reservations WHERE product_id = $1"#,
            broken.id,
        )
        .await;
    assert_eq!(on_broken, 1, "only the hand-made row");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pass_conflict_fails_alone_and_leaves_its_unit_on_sale() {
    let (_serial, h) = alone(one_flush).await;
    let product = h.product(3).await;
    let before = h.metrics().await;

    // A lone claim whose pass another transaction inserts meanwhile, which commits: the
    // replay's answer, that row.
    let held = hold_flush(&h).await;
    // Then a flush of three: two new passes and one whose pass is held likewise.
    let late = claims(product.id, "late");
    let late_tx = hold_pass(&h, "late", late.pid).await;
    let requests = vec![
        Request {
            what: "new 1",
            member: "n1".into(),
            product_id: product.id,
            token: pass(product.id, "n1"),
        },
        Request {
            what: "conflict",
            member: "late".into(),
            product_id: product.id,
            token: signer().sign(&late),
        },
        Request {
            what: "new 2",
            member: "n2".into(),
            product_id: product.id,
            token: pass(product.id, "n2"),
        },
    ];
    let pending = fire(&h, &requests).await;
    wait_for_waiting(&h, 1 + requests.len()).await;
    held.tx.commit().await.unwrap();
    let holder = held.claim.await.unwrap().expect("a replay");
    assert_eq!(
        (
            holder.status,
            holder.body.state,
            holder.body.member_id.as_str()
        ),
        (200, ReservationState::Cancelled, "holder")
    );
    // The flush of three now waits on the held pass, every unit of the product locked.
    wait_blocked(&h).await;
    late_tx.commit().await.unwrap();
    let (got, flushes) = replies_and_flushes(&h, pending, &before).await;
    assert_eq!(flushes, (2.0, 4.0, 0.0), "two flushes, neither failed");

    assert_eq!(seen(&got[0]), (201, None));
    assert_eq!(seen(&got[2]), (201, None));
    let replay = got[1].as_ref().expect("the conflict is a replay");
    assert_eq!(
        (
            replay.status,
            replay.body.state,
            replay.body.member_id.as_str()
        ),
        (200, ReservationState::Cancelled, "late")
    );
    // The unit locked for the conflicting pass is back on sale, not held by nobody.
    assert_eq!(unit_states(&h.admin, product.id).await, (1, 2, 0));
    let next = h.try_reserve_as("n3", product.id).await.unwrap();
    assert_eq!(next.status, 201);
    assert_eq!(unit_states(&h.admin, product.id).await, (0, 3, 0));
    h.stop().await;
}

/// A member's claim whose insert meets the member's other live reservation, inserted by
/// another transaction that commits meanwhile: that claim alone is over the limit
/// (told apart after the commit), the statement is not failed, the other claim in it is
/// made, and the unit locked for the refused one stays on sale.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_racing_the_members_other_claim_is_over_the_limit_alone() {
    let (_serial, h) = alone(no_sweep).await;
    let product = h.product(2).await;
    // The member's other claim, in flight: a live reservation of the product, on a unit
    // of a product of its own (claims of `product` must not find its unit locked).
    let other = uncommitted_reservation(&h, "racer", Uuid::new_v4(), Some(product.id)).await;
    let claim = |member: &str| {
        order::claim::NewClaim::unfunded(
            product.id,
            paysaga_common::auth::MemberId::parse(member).unwrap(),
            Uuid::new_v4(),
            Duration::from_secs(600),
            1,
        )
    };
    let pool = h.service_pool().await;
    let flush = tokio::spawn({
        let claims = vec![claim("racer"), claim("bystander")];
        async move { order::claim::claim(&pool, &claims).await }
    });
    wait_blocked(&h).await;
    other.commit().await.unwrap();
    let outcomes = flush.await.unwrap().expect("the statement is not failed");
    assert!(
        matches!(outcomes[0], Ok(order::claim::Claim::MemberLimit)),
        "{:?}",
        outcomes[0]
    );
    let Ok(order::claim::Claim::Created(made)) = &outcomes[1] else {
        panic!("the other claim is made: {:?}", outcomes[1]);
    };
    assert_eq!(made.member_id.as_str(), "bystander");
    assert_eq!(unit_states(&h.admin, product.id).await, (1, 1, 0));
    let racer = h.count(r#"SELECT COUNT(*) FROM order_service.reservations WHERE member_id = 'racer' AND state = 'RESERVED'"#).await;
    assert_eq!(racer, 1, "only the other transaction's reservation");
    h.stop().await;
}
