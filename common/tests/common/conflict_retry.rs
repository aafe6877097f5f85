//! A transaction PostgreSQL rolls back to break a deadlock is run again, and only its
//! successful run leaves anything behind. Two real transactions on a real server
//! deadlock on purpose: each locks one row, then waits for the other's.

use std::sync::atomic::{AtomicBool, Ordering};

use paysaga_common::retry;
use sqlx::{postgres::PgPoolOptions, PgPool};
use tokio::sync::Barrier;

/// A schema of its own in the administrator's database, dropped by [`Scratch::drop_now`].
struct Scratch {
    pool: PgPool,
    schema: String,
}

impl Scratch {
    async fn new() -> Self {
        let url = std::env::var("TEST_ADMIN_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres:postgres@127.0.0.1:5432/postgres".into());
        let schema = format!("conflict_{}", uuid::Uuid::new_v4().simple());
        let search_path = schema.clone();
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .after_connect(move |conn, _| {
                let sql = format!("SET search_path TO {search_path}");
                Box::pin(async move {
                    sqlx::Executor::execute(conn, sql.as_str()).await?;
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .expect("connect");
        // One session: the table goes into the new schema its search path names.
        sqlx::raw_sql(&format!(
            r#"CREATE SCHEMA {schema};
               CREATE TABLE counters (id INT PRIMARY KEY, n INT NOT NULL);
               INSERT INTO counters VALUES (1, 0), (2, 0)"#
        ))
        .execute(&pool)
        .await
        .expect("schema, table and rows");
        Self { pool, schema }
    }

    async fn counts(&self) -> Vec<(i32, i32)> {
        sqlx::query_as(r#"SELECT id, n FROM counters ORDER BY id"#)
            .fetch_all(&self.pool)
            .await
            .expect("counts")
    }

    async fn drop_now(self) {
        sqlx::query(&format!("DROP SCHEMA {} CASCADE", self.schema))
            .execute(&self.pool)
            .await
            .expect("drop schema");
    }
}

/// Two transactions set to deadlock on their first runs: each waits, holding its first
/// row, until the other holds the other row.
struct Deadlock {
    meet: Barrier,
    first_runs: [AtomicBool; 2],
}

impl Deadlock {
    fn new() -> Self {
        Self {
            meet: Barrier::new(2),
            first_runs: [AtomicBool::new(true), AtomicBool::new(true)],
        }
    }
}

/// Adds one to both rows, `first` (1 or 2) before the other, as transaction `first` of
/// `deadlock`.
async fn bump_both(pool: &PgPool, first: i32, deadlock: &Deadlock) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query(r#"UPDATE counters SET n = n + 1 WHERE id = $1"#)
        .bind(first)
        .execute(&mut *tx)
        .await?;
    if deadlock.first_runs[first as usize - 1].swap(false, Ordering::SeqCst) {
        deadlock.meet.wait().await;
    }
    sqlx::query(r#"UPDATE counters SET n = n + 1 WHERE id = $1"#)
        .bind(3 - first)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_retry_one_of_two_deadlocked_transactions_fails_whole() {
    let db = Scratch::new().await;
    let deadlock = Deadlock::new();
    let (a, b) = tokio::join!(
        bump_both(&db.pool, 1, &deadlock),
        bump_both(&db.pool, 2, &deadlock),
    );
    let failed: Vec<_> = [a, b].into_iter().filter_map(Result::err).collect();
    assert_eq!(failed.len(), 1, "PostgreSQL aborts exactly one: {failed:?}");
    assert!(
        retry::is_rolled_back_conflict(&failed[0]),
        "the failure is a deadlock: {:?}",
        failed[0]
    );
    assert_eq!(
        db.counts().await,
        vec![(1, 1), (2, 1)],
        "only the survivor's increments remain"
    );
    db.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlocked_transaction_is_run_again_and_applies_once() {
    let db = Scratch::new().await;
    let deadlock = Deadlock::new();
    let conflict = retry::is_rolled_back_conflict;
    let (a, b) = tokio::join!(
        retry::on_conflict(conflict, || bump_both(&db.pool, 1, &deadlock)),
        retry::on_conflict(conflict, || bump_both(&db.pool, 2, &deadlock)),
    );
    a.expect("first transaction");
    b.expect("second transaction");
    assert_eq!(
        db.counts().await,
        vec![(1, 2), (2, 2)],
        "each transaction applied exactly once"
    );
    db.drop_now().await;
}

#[tokio::test]
async fn other_failures_are_not_retried() {
    let db = Scratch::new().await;
    let mut tries = 0;
    let outcome: Result<(), sqlx::Error> =
        retry::on_conflict(retry::is_rolled_back_conflict, || {
            tries += 1;
            let pool = db.pool.clone();
            async move {
                sqlx::query(r#"INSERT INTO counters VALUES (1, 0)"#)
                    .execute(&pool)
                    .await
                    .map(|_| ())
            }
        })
        .await;
    assert!(outcome.is_err(), "a duplicate key fails");
    assert_eq!(
        tries, 1,
        "a unique violation is an answer, not a conflict to retry"
    );
    assert_eq!(db.counts().await, vec![(1, 0), (2, 0)]);
    db.drop_now().await;
}
