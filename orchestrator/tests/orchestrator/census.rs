//! The recovery job's census against real PostgreSQL: open payments per state, the attention
//! count, and the recovery lag (the longest a due payment nobody holds has waited).

use crate::support::payments_pool;
use orchestrator::store;
use paysaga_common::testkit::TestDb;
use sqlx::PgPool;
use uuid::Uuid;
use workflows::State;

/// A PROCESSING payment due `due_secs_ago` seconds ago, leased for `lease_secs` from now
/// (a negative lease has expired), flagged or not.
async fn payment(pool: &PgPool, due_secs_ago: i64, lease_secs: Option<i64>, attention: bool) {
    sqlx::query(
        r#"INSERT INTO payments (id, member_id, account_id, reservation_id, amount, state, pending_action,
                                 next_attempt_at, needs_attention, lease_owner, lease_until, product_id)
           VALUES ($1, 'member-1', 7, $2, 2500, 'PROCESSING', 'DEBIT',
                   now() - $3 * INTERVAL '1 second', $4,
                   CASE WHEN $5::BIGINT IS NULL THEN NULL ELSE gen_random_uuid() END,
                   now() + $5 * INTERVAL '1 second', 42)"#,
    )
    .bind(Uuid::now_v7())
    .bind(Uuid::now_v7())
    .bind(due_secs_ago)
    .bind(attention)
    .bind(lease_secs)
    .execute(pool)
    .await
    .expect("payment");
}

#[tokio::test]
async fn census_counts_states_attention_and_the_recovery_lag() {
    let db = TestDb::new().await;
    let pool = payments_pool(&db, 4).await;

    let empty = store::census(&pool).await.expect("census");
    assert!(empty.by_state.is_empty());
    assert_eq!((empty.attention, empty.recovery_lag_seconds), (0, 0.0));

    // A settled payment is not open.
    sqlx::query(
        r#"INSERT INTO payments (id, member_id, account_id, reservation_id, amount, state, product_id)
           VALUES ($1, 'member-1', 7, $2, 2500, 'COMPLETED', 42)"#,
    )
    .bind(Uuid::now_v7())
    .bind(Uuid::now_v7())
    .execute(&pool)
    .await
    .expect("settled payment");

    // Held by a live lease, flagged, or due in the future: none is recovery's backlog.
    payment(&pool, 7200, Some(60), false).await;
    payment(&pool, 7200, None, true).await;
    payment(&pool, -600, None, false).await;
    let idle = store::census(&pool).await.expect("census");
    assert_eq!(idle.by_state, vec![(State::Processing, 3)]);
    assert_eq!(idle.attention, 1);
    assert_eq!(idle.recovery_lag_seconds, 0.0);

    // Due an hour ago with an expired lease, and due a minute ago unleased: the lag is
    // the older one's wait.
    payment(&pool, 3600, Some(-5), false).await;
    payment(&pool, 60, None, false).await;
    let behind = store::census(&pool).await.expect("census");
    assert_eq!(behind.by_state, vec![(State::Processing, 5)]);
    assert!(
        (3600.0..7200.0).contains(&behind.recovery_lag_seconds),
        "{}",
        behind.recovery_lag_seconds
    );
}
