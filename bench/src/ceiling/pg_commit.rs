//! The PostgreSQL commit ceiling: each virtual client commits a single-row
//! `UPDATE ... RETURNING` on a row of its own (no lock waits: this measures commits).

use std::{str::FromStr, sync::Arc};

use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions},
    ConnectOptions,
};

use crate::{
    error::Result,
    load::{self, Load, Outcome},
    stats::RunSummary,
};

/// Runs the commit loop on the database at `url` through a pool of `connections`.
pub async fn run(load: &Load, url: &str, connections: u32) -> Result<RunSummary> {
    let options = PgConnectOptions::from_str(url)?
        .application_name("paysaga-bench-commit")
        .disable_statement_logging();
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .min_connections(connections)
        .connect_with(options)
        .await?;
    sqlx::query(r#"CREATE TABLE IF NOT EXISTS public.bench_commit_ceiling (id INT PRIMARY KEY, n BIGINT NOT NULL)"#)
        .execute(&pool)
        .await?;
    sqlx::query(
        r#"INSERT INTO public.bench_commit_ceiling (id, n) SELECT g, 0 FROM generate_series(0, $1 - 1) AS g ON CONFLICT (id) DO NOTHING"#,
    )
    .bind(load.concurrency as i32)
    .execute(&pool)
    .await?;
    let pool = Arc::new(pool);
    let inner = pool.clone();
    let summary = load::run(load, move |ctx| {
        let pool = inner.clone();
        async move {
            let n: sqlx::Result<i64> = sqlx::query_scalar(
                r#"UPDATE public.bench_commit_ceiling SET n = n + 1 WHERE id = $1 RETURNING n"#,
            )
            .bind(ctx.worker as i32)
            .fetch_one(pool.as_ref())
            .await;
            match n {
                Ok(_) => Outcome::ok(),
                Err(_) => Outcome::of("error:database"),
            }
        }
    })
    .await;
    pool.close().await;
    Ok(summary)
}
