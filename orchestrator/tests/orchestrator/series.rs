//! The drop page's series against real PostgreSQL: answered payments bucketed from the drop's first one, completions counted, latency percentiles per bucket and over the drop.

use crate::support::payments_pool;
use orchestrator::store;
use paysaga_common::testkit::TestDb;
use sqlx::PgPool;
use uuid::Uuid;

/// A payment of product 42 created `created` seconds after the drop's start and last
/// updated `latency_ms` later, in `state`.
async fn payment(pool: &PgPool, state: &str, created: f64, latency_ms: f64) {
    sqlx::query(
        r#"INSERT INTO payments (id, member_id, account_id, reservation_id, amount, state, pending_action, product_id,
                                 created_at, updated_at)
           VALUES ($1, 'member-1', 7, $2, 2500, $3, CASE WHEN $3 = 'PROCESSING' THEN 'DEBIT' END, 42,
                   TIMESTAMPTZ '2027-01-05 12:00:00+00' + $4 * INTERVAL '1 second',
                   TIMESTAMPTZ '2027-01-05 12:00:00+00' + $4 * INTERVAL '1 second' + $5 * INTERVAL '1 millisecond')"#,
    )
    .bind(Uuid::now_v7())
    .bind(Uuid::now_v7())
    .bind(state)
    .bind(created)
    .bind(latency_ms)
    .execute(pool)
    .await
    .expect("payment");
}

#[tokio::test]
async fn series_buckets_completions_and_latency() {
    let db = TestDb::new().await;
    let pool = payments_pool(&db, 4).await;
    assert!(store::drop_series(&pool).await.expect("series").is_empty());

    // Answered in second 0 (two), second 3 (one completed, one failed); one still open.
    payment(&pool, "COMPLETED", 0.0, 100.0).await;
    payment(&pool, "COMPLETED", 0.2, 300.0).await;
    payment(&pool, "COMPLETED", 3.0, 200.0).await;
    payment(&pool, "FAILED", 3.1, 400.0).await;
    payment(&pool, "PROCESSING", 3.2, 0.0).await;

    let all = store::drop_series(&pool).await.expect("series");
    let s = &all[&42];
    assert_eq!(s.bucket_secs, 1);
    let completed: Vec<i64> = s.buckets.iter().map(|b| b.completed).collect();
    assert_eq!(completed, vec![2, 0, 0, 1]);
    let offsets: Vec<i64> = s.buckets.iter().map(|b| b.offset_secs).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3]);
    assert_eq!(s.buckets[0].p50_ms, Some(200.0));
    assert_eq!(s.buckets[1].p50_ms, None);
    assert_eq!(s.buckets[3].p50_ms, Some(300.0));
    // Over the drop: 100, 200, 300, 400 ms.
    assert_eq!(s.p50_ms, Some(250.0));
    let p95 = s.p95_ms.expect("p95");
    assert!((p95 - 385.0).abs() < 1e-6, "{p95}");

    // A drop ten minutes long: buckets widen so there are at most MAX_BUCKETS.
    payment(&pool, "COMPLETED", 600.0, 100.0).await;
    let s = &store::drop_series(&pool).await.expect("series")[&42];
    assert_eq!(s.bucket_secs, 11);
    assert!(s.buckets.len() as i64 <= store::MAX_BUCKETS);
    assert_eq!(s.buckets.iter().map(|b| b.completed).sum::<i64>(), 4);
}
