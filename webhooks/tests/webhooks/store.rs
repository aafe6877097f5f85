//! The event log and the webhook tables against real PostgreSQL, as the orchestrator's
//! own role: the trigger writes one event per move into a terminal state and nothing
//! for a move that is rolled back; dispatch, claim and record keep one subject's
//! deliveries in order, honour leases and disabled endpoints; the order service's events
//! are taken in once each, in order; old settled events are purged, pending ones kept.

use std::time::Duration;

use crate::support::payments_db;
use chrono::Utc;
use paysaga_contracts::orchestrator::api::DeliveryFailure;
use paysaga_webhooks::{
    ingest::Source,
    sealing::SealingKey,
    store::{self, DeliveryState, Incoming, Outcome},
};
use sqlx::PgPool;
use uuid::Uuid;

async fn new_payment(pool: &PgPool) -> Uuid {
    let id = Uuid::now_v7();
    sqlx::query(
        r#"INSERT INTO payments (id, member_id, account_id, reservation_id, amount, state, pending_action,
                                 next_attempt_at, product_id)
           VALUES ($1, 'member-1', 7, $2, 2500, 'PROCESSING', 'DEBIT', now(), 42)"#,
    )
    .bind(id)
    .bind(Uuid::now_v7())
    .execute(pool)
    .await
    .expect("payment");
    id
}

async fn move_to(pool: &PgPool, id: Uuid, state: &str, pending: Option<&str>) {
    let mut c = pool.acquire().await.expect("connection");
    move_in(&mut c, id, state, pending).await;
}

/// Moves `id` to `state` with `pending` on `c` (inside a transaction, if `c` is one).
async fn move_in(c: &mut sqlx::PgConnection, id: Uuid, state: &str, pending: Option<&str>) {
    sqlx::query(
        r#"UPDATE payments
           SET state = $2, pending_action = $3,
               next_attempt_at = CASE WHEN $3::TEXT IS NULL THEN NULL ELSE now() END,
               failure_code = CASE WHEN $2 = 'FAILED' THEN 'INSUFFICIENT_FUNDS' END,
               version = version + 1, updated_at = now()
           WHERE id = $1"#,
    )
    .bind(id)
    .bind(state)
    .bind(pending)
    .execute(c)
    .await
    .expect("move");
}

async fn events_of(pool: &PgPool, subject: &str) -> Vec<(String, serde_json::Value)> {
    sqlx::query_as(r#"SELECT type, data FROM events WHERE subject = $1 ORDER BY seq"#)
        .bind(subject)
        .fetch_all(pool)
        .await
        .expect("events")
}

#[tokio::test]
async fn the_trigger_writes_one_event_per_terminal_move_and_none_for_a_rolled_back_one() {
    let (_db, pool) = payments_db(4).await;

    // PROCESSING -> ACCOUNT_DEBITED -> ORDER_CONFIRMED -> COMPLETED -> REFUND_PROCESSING
    // -> REFUNDED, with updates that change no state in between.
    let paid = new_payment(&pool).await;
    move_to(&pool, paid, "ACCOUNT_DEBITED", Some("CONFIRM")).await;
    sqlx::query(r#"UPDATE payments SET attempts = attempts + 1 WHERE id = $1"#)
        .bind(paid)
        .execute(&pool)
        .await
        .expect("no state change");
    move_to(&pool, paid, "ORDER_CONFIRMED", Some("COMPLETE")).await;
    move_to(&pool, paid, "COMPLETED", None).await;
    move_to(&pool, paid, "REFUND_PROCESSING", Some("CANCEL_ORDER")).await;
    move_to(&pool, paid, "REFUND_PROCESSING", Some("REFUND")).await;
    move_to(&pool, paid, "REFUNDED", None).await;
    let events = events_of(&pool, &paid.to_string()).await;
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, ["payment.completed", "payment.refunded"]);
    let data = &events[0].1;
    assert_eq!(data["payment_id"], paid.to_string());
    assert_eq!(
        (
            &data["member_id"],
            &data["account_id"],
            &data["product_id"],
            &data["amount"]
        ),
        (
            &serde_json::json!("member-1"),
            &serde_json::json!("7"),
            &serde_json::json!("42"),
            &serde_json::json!(2500)
        )
    );
    assert!(data.get("reason").is_none());

    // FAILED, then the reservation's cancel (FAILED -> FAILED): one event, with the reason.
    let failed = new_payment(&pool).await;
    move_to(&pool, failed, "FAILED", Some("CANCEL_RESERVATION")).await;
    move_to(&pool, failed, "FAILED", None).await;
    let events = events_of(&pool, &failed.to_string()).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "payment.failed");
    assert_eq!(events[0].1["reason"], "INSUFFICIENT_FUNDS");

    // A move rolled back leaves no event behind.
    let rolled_back = new_payment(&pool).await;
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query(
        r#"UPDATE payments SET state = 'FAILED', pending_action = NULL, next_attempt_at = NULL WHERE id = $1"#,
    )
    .bind(rolled_back)
    .execute(&mut *tx)
    .await
    .expect("move");
    tx.rollback().await.expect("rollback");
    assert!(events_of(&pool, &rolled_back.to_string()).await.is_empty());

    // Event ids are UUIDv7 and their time is the commit's.
    let ids: Vec<Uuid> = sqlx::query_scalar(r#"SELECT id FROM events"#)
        .fetch_all(&pool)
        .await
        .expect("ids");
    assert!(ids.iter().all(|id| id.get_version_num() == 7));
}

async fn endpoint(pool: &PgPool, types: &[&str]) -> Uuid {
    let types: Vec<String> = types.iter().map(|t| (*t).to_owned()).collect();
    let id = Uuid::now_v7();
    store::create_endpoint(
        pool,
        id,
        "http://127.0.0.1:9/hook",
        &SealingKey::development().seal(id, "whsec_test"),
        &types,
        "",
    )
    .await
    .expect("endpoint")
    .id
}

/// Dispatches until `events` events have gone (transactions anywhere on the server
/// hold the dispatch horizon back for a moment), returning (events, deliveries).
async fn dispatch_until(pool: &PgPool, events: i64) -> (i64, i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (mut e, mut d) = (0, 0);
    while e < events && std::time::Instant::now() < deadline {
        let got = store::dispatch(pool, 500)
            .await
            .expect("dispatch")
            .expect("lock free");
        e += got.events;
        d += got.deliveries;
        if e < events {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    (e, d)
}

fn incoming(subject: &str, event_type: &str) -> Incoming {
    Incoming {
        id: Uuid::now_v7(),
        event_type: event_type.to_owned(),
        subject: subject.to_owned(),
        data: serde_json::json!({"subject": subject}),
        occurred_at: Utc::now(),
    }
}

#[tokio::test]
async fn one_subjects_deliveries_go_in_order_under_leases() {
    let (_db, pool) = payments_db(4).await;
    let all = endpoint(&pool, &[]).await;
    let offers_only = endpoint(&pool, &["waitlist.offer_made"]).await;
    let off = endpoint(&pool, &[]).await;
    store::set_enabled(&pool, off, false)
        .await
        .expect("disable")
        .expect("exists");

    // Taken in once each, in the order given, however often they are pulled.
    let (a1, a2, b1) = (
        incoming("offer-a", "waitlist.offer_made"),
        incoming("offer-a", "waitlist.offer_expired"),
        incoming("offer-b", "waitlist.offer_made"),
    );
    let page = vec![a1.clone(), a2.clone(), b1.clone()];
    assert_eq!(
        store::ingest(&pool, Source::Order, &page)
            .await
            .expect("ingest"),
        3
    );
    assert_eq!(
        store::ingest(&pool, Source::Order, &page)
            .await
            .expect("again"),
        0
    );
    let order: Vec<Uuid> = sqlx::query_scalar(r#"SELECT id FROM events ORDER BY seq"#)
        .fetch_all(&pool)
        .await
        .expect("order");
    assert_eq!(order, vec![a1.id, a2.id, b1.id]);

    // Fan-out: every event to the catch-all, offers made to the subscriber, nothing to
    // the disabled endpoint.
    assert_eq!(dispatch_until(&pool, 3).await, (3, 5));
    let again = store::dispatch(&pool, 500)
        .await
        .expect("dispatch")
        .expect("lock");
    assert_eq!((again.events, again.deliveries), (0, 0));
    let to_off: i64 =
        sqlx::query_scalar(r#"SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_id = $1"#)
            .bind(off)
            .fetch_one(&pool)
            .await
            .expect("count");
    assert_eq!(to_off, 0);

    // The first claim gets each subject's first event only: offer-a's expiry waits.
    let lease = Duration::from_secs(30);
    let (me, other) = (Uuid::new_v4(), Uuid::new_v4());
    let first = store::claim(&pool, me, lease, 100).await.expect("claim");
    let mut got: Vec<(Uuid, String)> = first.iter().map(|c| (c.event_id, c.url.clone())).collect();
    got.sort();
    assert_eq!(first.len(), 4, "{got:?}");
    assert!(first.iter().all(|c| c.event_id != a2.id));
    assert!(first.iter().all(|c| c.attempts == 1));
    // Leased: nobody else takes them meanwhile.
    assert!(store::claim(&pool, other, lease, 100)
        .await
        .expect("claim")
        .is_empty());

    // offer-a's first event to the catch-all fails: the second still waits behind it.
    let a1_all = first
        .iter()
        .find(|c| c.event_id == a1.id && c.url.ends_with("/hook"))
        .expect("a1")
        .id;
    let a1_ids: Vec<Uuid> = sqlx::query_scalar(
        r#"SELECT id FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2"#,
    )
    .bind(a1.id)
    .bind(all)
    .fetch_all(&pool)
    .await
    .expect("ids");
    assert_eq!(a1_ids, vec![a1_all]);
    for c in &first {
        let outcome = if c.id == a1_all {
            Outcome::Failed {
                status: Some(500),
                error: DeliveryFailure::HttpStatus,
                retry_in: Some(Duration::ZERO),
            }
        } else {
            Outcome::Delivered { status: 200 }
        };
        assert!(store::record(&pool, c.id, me, &outcome)
            .await
            .expect("record"));
    }
    let retry = store::claim(&pool, other, lease, 100).await.expect("claim");
    assert_eq!(
        retry.iter().map(|c| (c.id, c.attempts)).collect::<Vec<_>>(),
        vec![(a1_all, 2)],
        "the retry comes first, the later event of its subject still waits"
    );
    // A stale owner cannot record over the new one.
    assert!(
        !store::record(&pool, a1_all, me, &Outcome::Delivered { status: 200 })
            .await
            .expect("record")
    );
    // DEAD: the later event goes on.
    assert!(store::record(
        &pool,
        a1_all,
        other,
        &Outcome::Failed {
            status: None,
            error: DeliveryFailure::Timeout,
            retry_in: None
        }
    )
    .await
    .expect("record"));
    let next = store::claim(&pool, other, lease, 100).await.expect("claim");
    assert_eq!(
        next.iter().map(|c| c.event_id).collect::<Vec<_>>(),
        vec![a2.id]
    );
    assert!(store::record(
        &pool,
        next[0].id,
        other,
        &Outcome::Delivered { status: 204 }
    )
    .await
    .expect("record"));

    // Replay makes the DEAD one due again, its attempts counted afresh.
    let row = store::replay(&pool, a1_all)
        .await
        .expect("replay")
        .expect("it was DEAD");
    assert_eq!(
        (row.id, row.state, row.attempts),
        (a1_all, DeliveryState::Pending, 0)
    );
    assert!(store::replay(&pool, a1_all)
        .await
        .expect("not DEAD any more")
        .is_none());
    let replayed = store::claim(&pool, me, lease, 100).await.expect("claim");
    assert_eq!(
        replayed
            .iter()
            .map(|c| (c.id, c.attempts))
            .collect::<Vec<_>>(),
        vec![(a1_all, 1)]
    );

    // A PENDING delivery to an endpoint that is then disabled waits, and goes once enabled.
    let c1 = incoming("offer-c", "waitlist.offer_made");
    store::ingest(&pool, Source::Order, std::slice::from_ref(&c1))
        .await
        .expect("ingest");
    assert_eq!(dispatch_until(&pool, 1).await.0, 1);
    store::set_enabled(&pool, offers_only, false)
        .await
        .expect("disable");
    let claimed = store::claim(&pool, me, lease, 100).await.expect("claim");
    assert_eq!(claimed.len(), 1, "only the catch-all's");
    store::set_enabled(&pool, offers_only, true)
        .await
        .expect("enable");
    assert_eq!(
        store::claim(&pool, me, lease, 100)
            .await
            .expect("claim")
            .len(),
        1
    );

    // The lag gauge sees the oldest undelivered event; DEAD ones are counted apart, and
    // the backlog is every PENDING delivery to an enabled endpoint.
    let census = store::census(&pool).await.expect("census");
    assert!(census.lag_seconds >= 0.0);
    assert_eq!(census.dead, 0);
    let pending: i64 = sqlx::query_scalar(
        r#"
        SELECT COUNT(*)
        FROM webhook_deliveries d
        JOIN webhook_endpoints ep ON ep.id = d.endpoint_id AND ep.enabled
        WHERE d.state = 'PENDING'
        "#,
    )
    .fetch_one(&pool)
    .await
    .expect("pending");
    assert!(pending > 0, "the two claimed deliveries are still PENDING");
    assert_eq!(census.pending, pending);
}

#[tokio::test]
async fn old_settled_events_are_purged_and_pending_ones_kept() {
    let (_db, pool) = payments_db(4).await;
    endpoint(&pool, &[]).await;
    let (done, waiting) = (
        incoming("s-1", "reservation.expired"),
        incoming("s-2", "reservation.expired"),
    );
    store::ingest(&pool, Source::Order, &[done.clone(), waiting.clone()])
        .await
        .expect("ingest");
    assert_eq!(dispatch_until(&pool, 2).await.0, 2);
    let me = Uuid::new_v4();
    for c in store::claim(&pool, me, Duration::from_secs(30), 100)
        .await
        .expect("claim")
    {
        let outcome = if c.event_id == done.id {
            Outcome::Delivered { status: 200 }
        } else {
            Outcome::Failed {
                status: Some(503),
                error: DeliveryFailure::HttpStatus,
                retry_in: Some(Duration::from_secs(60)),
            }
        };
        store::record(&pool, c.id, me, &outcome)
            .await
            .expect("record");
    }
    // Nothing is old enough yet.
    let purge_hour_old = || async {
        store::purge(&pool, Duration::from_secs(3600), 1000)
            .await
            .expect("purge")
    };
    assert_eq!(purge_hour_old().await, (0, 0));
    sqlx::query(r#"UPDATE events SET recorded_at = now() - INTERVAL '2 hours'"#)
        .execute(&pool)
        .await
        .expect("age");
    assert_eq!(purge_hour_old().await, (1, 1));
    let left: Vec<Uuid> = sqlx::query_scalar(r#"SELECT id FROM events"#)
        .fetch_all(&pool)
        .await
        .expect("left");
    assert_eq!(left, vec![waiting.id], "the pending one stays");
}

/// An event whose transaction commits after a later-numbered one is never left behind
/// the dispatch cursor: dispatch waits for every older transaction to end.
#[tokio::test]
async fn an_event_committed_late_is_never_skipped_by_the_cursor() {
    let (_db, pool) = payments_db(4).await;
    let ep = endpoint(&pool, &[]).await;

    let early = new_payment(&pool).await;
    let late = new_payment(&pool).await;
    // `early` moves first (its transaction takes its id first) but commits last.
    let mut slow = pool.begin().await.expect("begin");
    sqlx::query(r#"UPDATE payments SET state = 'COMPLETED', pending_action = NULL, next_attempt_at = NULL, updated_at = now() WHERE id = $1"#)
        .bind(early)
        .execute(&mut *slow)
        .await
        .expect("early completes");
    move_to(&pool, late, "COMPLETED", None).await;

    let d = store::dispatch(&pool, 500)
        .await
        .expect("dispatch")
        .expect("lock");
    assert_eq!(
        (d.events, d.deliveries),
        (0, 0),
        "nothing goes while an older transaction is open"
    );
    slow.commit().await.expect("commit");

    assert_eq!(dispatch_until(&pool, 2).await, (2, 2));
    let subjects: Vec<String> = sqlx::query_scalar(
        r#"SELECT subject FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY event_seq"#,
    )
    .bind(ep)
    .fetch_all(&pool)
    .await
    .expect("deliveries");
    assert_eq!(
        subjects,
        vec![early.to_string(), late.to_string()],
        "both delivered, each once"
    );
    let left: i64 = sqlx::query_scalar(r#"SELECT COUNT(*) FROM events_undispatched"#)
        .fetch_one(&pool)
        .await
        .expect("left");
    assert_eq!(left, 0);
}

/// Many writers commit events in overlapping transactions while several dispatchers run
/// at once: every event is fanned out exactly once to every endpoint subscribed to it,
/// none left behind the cursor and none twice. In each round every writer's transaction
/// holds its events before any commits; half commit, then the other half, so
/// transactions that took their ids earlier often commit later.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_and_dispatchers_fan_each_event_out_exactly_once() {
    use std::sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    };
    use tokio::sync::Barrier;

    const WRITERS: usize = 8;
    const ROUNDS: usize = 12;
    /// Payments settled per transaction: events sharing one transaction id.
    const PER_TX: usize = 2;
    const DISPATCHERS: usize = 4;
    /// Small batches, so a dispatch often stops in the middle of what is committed.
    const BATCH: i64 = 5;
    const EVENTS: i64 = (WRITERS * ROUNDS * PER_TX) as i64;

    let (_db, pool) = payments_db((WRITERS + DISPATCHERS + 2) as u32).await;
    let all = endpoint(&pool, &[]).await;
    let completions = endpoint(&pool, &["payment.completed"]).await;
    let mut ids = Vec::new();
    for _ in 0..EVENTS {
        ids.push(new_payment(&pool).await);
    }
    let ids = Arc::new(ids);

    let writing = Arc::new(AtomicBool::new(true));
    let dispatchers: Vec<_> = (0..DISPATCHERS)
        .map(|_| {
            let (pool, writing) = (pool.clone(), writing.clone());
            tokio::spawn(async move {
                let (mut events, mut deliveries) = (0, 0);
                while writing.load(Ordering::Acquire) {
                    // `None`: another dispatcher holds the lock this turn.
                    if let Some(d) = store::dispatch(&pool, BATCH).await.expect("dispatch") {
                        events += d.events;
                        deliveries += d.deliveries;
                    }
                    tokio::task::yield_now().await;
                }
                (events, deliveries)
            })
        })
        .collect();

    let (held, half) = (
        Arc::new(Barrier::new(WRITERS)),
        Arc::new(Barrier::new(WRITERS)),
    );
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (pool, ids, held, half) = (pool.clone(), ids.clone(), held.clone(), half.clone());
            tokio::spawn(async move {
                for round in 0..ROUNDS {
                    let mut tx = pool.begin().await.expect("begin");
                    for k in 0..PER_TX {
                        let i = (round * WRITERS + w) * PER_TX + k;
                        // Every third payment fails: the completions endpoint skips it.
                        let state = if i.is_multiple_of(3) {
                            "FAILED"
                        } else {
                            "COMPLETED"
                        };
                        // A terminal state: the trigger writes its event.
                        move_in(&mut tx, ids[i], state, None).await;
                    }
                    held.wait().await;
                    if w % 2 == 1 {
                        tx.commit().await.expect("commit");
                        half.wait().await;
                    } else {
                        half.wait().await;
                        tx.commit().await.expect("commit");
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.await.expect("writer");
    }
    writing.store(false, Ordering::Release);
    let (mut events, mut deliveries) = (0, 0);
    for d in dispatchers {
        let (e, n) = d.await.expect("dispatcher");
        events += e;
        deliveries += n;
    }
    // What the dispatchers had not reached when the writers finished.
    let (e, n) = dispatch_until(&pool, EVENTS - events).await;
    let (events, deliveries) = (events + e, deliveries + n);

    let completed: i64 =
        sqlx::query_scalar(r#"SELECT COUNT(*) FROM events WHERE type = 'payment.completed'"#)
            .fetch_one(&pool)
            .await
            .expect("completed");
    let total: i64 = sqlx::query_scalar(r#"SELECT COUNT(*) FROM events"#)
        .fetch_one(&pool)
        .await
        .expect("events");
    assert_eq!(total, EVENTS, "one event per settled payment");
    assert_eq!(
        (events, deliveries),
        (EVENTS, EVENTS + completed),
        "the dispatchers took each event once"
    );
    // In PostgreSQL: per event and endpoint, exactly the deliveries it is owed.
    for (endpoint, wants) in [(all, "TRUE"), (completions, "e.type = 'payment.completed'")] {
        let wrong: Vec<(Uuid, i64)> = sqlx::query_as(&format!(
            r#"SELECT e.id, COUNT(d.id)
               FROM events e
               LEFT JOIN webhook_deliveries d ON d.event_id = e.id AND d.endpoint_id = $1
               GROUP BY e.id, e.type
               HAVING COUNT(d.id) <> CASE WHEN {wants} THEN 1 ELSE 0 END"#
        ))
        .bind(endpoint)
        .fetch_all(&pool)
        .await
        .expect("deliveries per event");
        assert!(
            wrong.is_empty(),
            "events with the wrong number of deliveries to {endpoint}: {wrong:?}"
        );
    }
    let rows: i64 = sqlx::query_scalar(r#"SELECT COUNT(*) FROM webhook_deliveries"#)
        .fetch_one(&pool)
        .await
        .expect("rows");
    assert_eq!(rows, EVENTS + completed);
    let left: i64 = sqlx::query_scalar(r#"SELECT COUNT(*) FROM events_undispatched"#)
        .fetch_one(&pool)
        .await
        .expect("left");
    assert_eq!(left, 0, "nothing left behind the cursor");
}
