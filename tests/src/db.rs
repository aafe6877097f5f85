//! Reads of PostgreSQL that the tests check what they were told against: one value, a
//! count, a count waited for, an account's balance.

use std::time::{Duration, Instant};

use sqlx::{PgPool, Postgres};

/// The value `query` selects for the id `of` (its `$1`).
pub async fn value_of<T, I>(pool: &PgPool, query: &str, of: I) -> anyhow::Result<T>
where
    T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres> + Send + Unpin,
    I: for<'q> sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres> + Send,
{
    Ok(sqlx::query_scalar(query).bind(of).fetch_one(pool).await?)
}

/// What `query` counts for the id `of` (its `$1`).
pub async fn count_of<I>(pool: &PgPool, query: &str, of: I) -> anyhow::Result<i64>
where
    I: for<'q> sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres> + Send,
{
    value_of(pool, query, of).await
}

/// Polls `query` (a COUNT or a boolean as 0/1) until it returns `want`, for up to a
/// minute.
pub async fn wait_for(pool: &PgPool, what: &str, query: &str, want: i64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got: i64 = sqlx::query_scalar(query).fetch_one(pool).await?;
        if got == want {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: {got}, expected {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The balance of the account `id`.
pub async fn balance(pool: &PgPool, id: i64) -> anyhow::Result<i64> {
    value_of(
        pool,
        r#"SELECT balance FROM account_service.accounts WHERE id = $1"#,
        id,
    )
    .await
}
