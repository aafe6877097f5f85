//! Scenario 4: checkout saga throughput with ample stock and funds. Reservations are made
//! first (untimed for the saga), then every one is paid through the orchestrator; the
//! PostgreSQL commits of the paying phase are counted from pg_stat_database.

use std::{
    sync::{Arc, OnceLock},
    time::Duration,
};

use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    client::Buyers,
    error::Result,
    flow::Endpoints,
    load::{self, Load, Outcome},
    scenario::drop::mint_passes,
    stats::RunSummary,
};

/// Reserves `load.max_ops` units of `product` (development passes, no gate); the ids
/// land in the returned slots, in buyer order.
pub async fn reserve(
    load: &Load,
    ep: Endpoints,
    buyers: Buyers,
    product: i64,
) -> (RunSummary, Arc<Vec<OnceLock<Uuid>>>) {
    let n = load.max_ops as usize;
    let passes = mint_passes(&buyers, product, n);
    let slots: Arc<Vec<OnceLock<Uuid>>> = Arc::new((0..n).map(|_| OnceLock::new()).collect());
    let s = slots.clone();
    let summary = load::run(load, move |ctx| {
        let (ep, buyers, passes, slots) = (ep.clone(), buyers.clone(), passes.clone(), s.clone());
        async move {
            let i = ctx.seq as usize;
            match ep.reserve(buyers.token(i), product, &passes[i]).await {
                Ok(id) => {
                    let _ = slots[i].set(id);
                    Outcome::of("reserved")
                }
                Err(o) => o,
            }
        }
    })
    .await;
    (summary, slots)
}

/// Pays every reservation made: `completed` expected for each.
pub async fn pay(
    load: &Load,
    ep: Endpoints,
    buyers: Buyers,
    accounts: Arc<Vec<i64>>,
    slots: Arc<Vec<OnceLock<Uuid>>>,
) -> RunSummary {
    load::run(load, move |ctx| {
        let (ep, buyers, accounts, slots) =
            (ep.clone(), buyers.clone(), accounts.clone(), slots.clone());
        async move {
            let i = ctx.seq as usize;
            let (Some(reservation), Some(&account)) = (
                slots.get(i).and_then(|s| s.get()),
                accounts.get(i % accounts.len().max(1)),
            ) else {
                return Outcome::of("error:no_reservation");
            };
            ep.pay(buyers.token(i), *reservation, account).await
        }
    })
    .await
}

/// Committed transactions of the current database so far. Backends publish their counts
/// at most once a second while busy and within ~10 s once idle, so callers wait first.
pub async fn xact_commit(pool: &PgPool) -> Result<i64> {
    let mut conn = pool.acquire().await?;
    sqlx::query(r#"SELECT pg_stat_clear_snapshot()"#)
        .execute(&mut *conn)
        .await?;
    Ok(sqlx::query_scalar(
        r#"SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"#,
    )
    .fetch_one(&mut *conn)
    .await?)
}

/// How long to wait for every backend to have published its transaction counts.
pub const STATS_SETTLE: Duration = Duration::from_secs(11);

/// Rows inserted, updated and deleted so far, per table, for this database.
pub async fn table_writes(pool: &PgPool) -> Result<std::collections::BTreeMap<String, i64>> {
    let mut conn = pool.acquire().await?;
    sqlx::query(r#"SELECT pg_stat_clear_snapshot()"#)
        .execute(&mut *conn)
        .await?;
    let rows: Vec<(String, i64)> = sqlx::query_as(
        r#"SELECT schemaname || '.' || relname, (n_tup_ins + n_tup_upd + n_tup_del)::BIGINT
           FROM pg_stat_user_tables"#,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().collect())
}
