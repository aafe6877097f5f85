//! Scenario 5: Redis lost mid-drop. The gate runs against a Redis of the scenario's own
//! (no persistence), which is SIGKILLed while payments are in flight and started again
//! empty after a while: the quota, the passes in flight and the sold-out marks are gone,
//! and the gate must degrade, then rebuild its quota from the order service.

use super::{Ctx, Injection};

/// What the evidence counts: the faults hitting work in progress.
const EVIDENCE: &str = "Redis keys lost with the server";

pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    let mut kills = 0;
    let mut keys_lost = 0;
    while ctx.next_strike().await? {
        let redis = ctx.private_redis("redis-loss")?;
        keys_lost += redis.dbsize().await.unwrap_or(0);
        redis.kill();
        kills += 1;
        tokio::time::sleep(ctx.plan.fault_for).await;
        ctx.private_redis("redis-loss")?.restart().await?;
        ctx.between_strikes().await;
    }
    Ok(Injection::evidenced(kills, EVIDENCE, keys_lost))
}
