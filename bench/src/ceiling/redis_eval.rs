//! The Redis ceiling: EVALSHA of a script that returns a constant, over one multiplexed
//! connection as a service holds it.

use std::sync::Arc;

use crate::{
    error::Result,
    load::{self, Load, Outcome},
    stats::RunSummary,
};

const TRIVIAL: &str = "return 1";

pub async fn run(load: &Load, redis_url: &str, prefix: &str) -> Result<RunSummary> {
    let client = redis::Client::open(redis_url)?;
    let conn = redis::aio::ConnectionManager::new(client).await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(TRIVIAL)
        .query_async(&mut conn.clone())
        .await?;
    let sha = Arc::new(sha);
    let key = Arc::new(format!("{prefix}ceiling"));
    Ok(load::run(load, move |_| {
        let (mut conn, sha, key) = (conn.clone(), sha.clone(), key.clone());
        async move {
            let answer: redis::RedisResult<i64> = redis::cmd("EVALSHA")
                .arg(sha.as_str())
                .arg(1)
                .arg(key.as_str())
                .query_async(&mut conn)
                .await;
            match answer {
                Ok(1) => Outcome::ok(),
                Ok(_) => Outcome::of("error:unexpected_value"),
                Err(_) => Outcome::of("error:redis"),
            }
        }
    })
    .await)
}
