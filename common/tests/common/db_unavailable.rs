//! Which database errors mean "unavailable, retry" (`paysaga_common::db::unavailable`),
//! each produced for real by a PostgreSQL server, not constructed.

use std::time::Duration;

use paysaga_common::db::{unavailable, unavailable_sqlstate};
use sqlx::{postgres::PgPoolOptions, Connection, Executor, PgConnection};

fn admin_url() -> String {
    std::env::var("TEST_ADMIN_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres:postgres@127.0.0.1:5432/postgres".into())
}

#[tokio::test]
async fn connection_loss_and_server_refusals_are_unavailable_mistakes_are_not() {
    // 57P01 admin_shutdown: the server ends the session (as a shutting-down primary does).
    let mut conn = PgConnection::connect(&admin_url()).await.expect("connect");
    let e = conn
        .execute(r#"SELECT pg_terminate_backend(pg_backend_pid())"#)
        .await
        .expect_err("terminating its own session fails the statement");
    assert!(unavailable(&e), "{e:?}");

    // 25006 read_only_sql_transaction: a write on a node that takes none (a standby).
    let mut conn = PgConnection::connect(&admin_url()).await.expect("connect");
    conn.execute(r#"SET default_transaction_read_only = on"#)
        .await
        .expect("set");
    let e = conn
        .execute(r#"CREATE TEMPORARY TABLE never (x INTEGER)"#)
        .await
        .expect_err("a read-only session refuses writes");
    assert_eq!(
        e.as_database_error().and_then(|d| d.code()).as_deref(),
        Some("25006")
    );
    assert!(unavailable(&e), "{e:?}");

    // Io: nothing listens (the primary is gone, the proxy has no node).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let e = PgConnection::connect(&format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        .await
        .expect_err("nothing listens");
    assert!(matches!(e, sqlx::Error::Io(_)), "{e:?}");
    assert!(unavailable(&e), "{e:?}");

    // PoolTimedOut and PoolClosed.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_millis(200))
        .connect(&admin_url())
        .await
        .expect("pool");
    let held = pool.acquire().await.expect("one connection");
    let e = pool.acquire().await.expect_err("none free");
    assert!(matches!(e, sqlx::Error::PoolTimedOut), "{e:?}");
    assert!(unavailable(&e), "{e:?}");
    drop(held);
    pool.close().await;
    let e = pool.acquire().await.expect_err("closed");
    assert!(matches!(e, sqlx::Error::PoolClosed), "{e:?}");
    assert!(unavailable(&e), "{e:?}");

    // A mistake in the statement or the data is not an outage.
    let mut conn = PgConnection::connect(&admin_url()).await.expect("connect");
    let e = conn
        .execute(r#"SELECT 1 / 0"#)
        .await
        .expect_err("division by zero");
    assert!(!unavailable(&e), "{e:?}");
    let e = conn
        .execute(r#"SELECT * FROM no_such_table"#)
        .await
        .expect_err("undefined table");
    assert!(!unavailable(&e), "{e:?}");
    assert!(!unavailable(&sqlx::Error::RowNotFound));
}

#[test]
fn sqlstates_of_an_outage() {
    for code in [
        "08000", "08001", "08003", "08006", "57P01", "57P02", "57P03", "25006",
    ] {
        assert!(unavailable_sqlstate(code), "{code}");
    }
    for code in ["23505", "40001", "40P01", "57014", "22003", "25P02"] {
        assert!(!unavailable_sqlstate(code), "{code}");
    }
}
