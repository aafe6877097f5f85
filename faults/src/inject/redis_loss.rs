//! Scenario 5: Redis lost mid-drop. The gate's Redis link is cut (its connections reset,
//! new ones refused) and, on the first cut, every key under the gate's prefix is deleted,
//! as a Redis restarted without persistence would come back; then the link is restored.
//! The shared Redis server itself keeps running: other test runs use it.

use std::time::Duration;

use anyhow::Context as _;
use paysaga_e2e::Link;

use super::{Ctx, Injection};

pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    let mut cuts = 0;
    let mut keys_lost = 0;
    for i in 0..ctx.plan.repeats {
        if i > 0 && ctx.drop_over() {
            break;
        }
        ctx.strike_when_in(&["PROCESSING", "ACCOUNT_DEBITED"])
            .await?;
        ctx.proxy(Link::Redis)?.cut();
        cuts += 1;
        if i == 0 {
            keys_lost += flush_prefix(&ctx.stack.redis.url, &ctx.stack.redis.prefix).await?;
        }
        tokio::time::sleep(ctx.plan.fault_for).await;
        ctx.proxy(Link::Redis)?.heal();
        ctx.pause(Duration::from_millis(300), Duration::from_millis(1000))
            .await;
    }
    Ok(Injection {
        faults: cuts,
        evidence: vec![("gate keys lost with Redis".into(), keys_lost)],
    })
}

/// Deletes every key under `prefix`, directly on Redis (not through the cut link).
async fn flush_prefix(url: &str, prefix: &str) -> anyhow::Result<i64> {
    let client = redis::Client::open(url).context("opening Redis")?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .context("connecting to Redis")?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .context("listing the gate's keys")?;
    let mut deleted = 0;
    for chunk in keys.chunks(500) {
        let n: i64 = redis::cmd("DEL")
            .arg(chunk)
            .query_async(&mut conn)
            .await
            .context("deleting the gate's keys")?;
        deleted += n;
    }
    Ok(deleted)
}
