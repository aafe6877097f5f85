//! The ledger reconciliation: a periodic count of member accounts whose balance is not
//! the sum of their signed ledger rows, exported for an alert (it must always be 0).

use std::time::Duration;

use paysaga_common::jobs::Jobs;
use sqlx::PgPool;

/// Member accounts whose balance disagrees with their applied rows (the `entries` view
/// signs them). The merchant's balance lives in its shards and is not counted here.
const UNEXPLAINED_SQL: &str = r#"
    SELECT COUNT(*)
    FROM accounts a
    LEFT JOIN (SELECT account_id, SUM(amount) AS total FROM entries GROUP BY account_id) e
           ON e.account_id = a.id
    WHERE a.kind = 'MEMBER' AND a.balance <> COALESCE(e.total, 0)
"#;

/// One reconciliation: the count, also set as `account_ledger_unexplained_accounts`.
#[tracing::instrument(skip_all)]
pub async fn run_once(pool: &PgPool) -> anyhow::Result<i64> {
    let unexplained: i64 = sqlx::query_scalar(UNEXPLAINED_SQL).fetch_one(pool).await?;
    metrics::gauge!("account_ledger_unexplained_accounts").set(unexplained as f64);
    if unexplained > 0 {
        tracing::error!(
            unexplained,
            "member balances disagree with their ledger rows"
        );
    }
    Ok(unexplained)
}

/// Runs [`run_once`] every `interval` on `jobs`.
pub async fn schedule(jobs: &Jobs, pool: PgPool, interval: Duration) -> anyhow::Result<()> {
    jobs.every("ledger_reconcile", interval, move || {
        let pool = pool.clone();
        async move {
            if let Err(e) = run_once(&pool).await {
                tracing::warn!(error = %e, "ledger reconciliation failed; the next run retries");
            }
        }
    })
    .await?;
    Ok(())
}
