//! Writes the tables as an administrator who has switched the database's own guards
//! off (`session_replication_role = replica`: no triggers, so no deferred ledger check),
//! so the checkers behind those guards can be shown to catch what gets past them.

use sqlx::PgPool;

/// Runs `statements` in order, in one transaction, with every trigger off.
pub async fn tamper(pool: &PgPool, statements: &[String]) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await?;
    for sql in statements {
        sqlx::query(sql).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}
