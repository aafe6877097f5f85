//! Scenario 5: Redis lost mid-drop. The gate runs against a Redis of the scenario's own
//! (no persistence), which is SIGKILLed while payments are in flight and started again
//! empty after a while: the quota, the passes in flight and the sold-out marks are gone,
//! and the gate must degrade, then rebuild its quota from the order service.

use anyhow::Context as _;

use super::{Ctx, Injection};

pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    let mut kills = 0;
    let mut keys_lost = 0;
    for i in 0..ctx.plan.repeats {
        if !ctx.next_strike(i).await? {
            break;
        }
        let redis = ctx
            .redis
            .as_deref_mut()
            .context("the redis-loss scenario runs on a private Redis")?;
        keys_lost += redis.dbsize().await.unwrap_or(0);
        redis.kill();
        kills += 1;
        tokio::time::sleep(ctx.plan.fault_for).await;
        ctx.redis
            .as_deref_mut()
            .context("the redis-loss scenario runs on a private Redis")?
            .restart()
            .await?;
        ctx.between_strikes().await;
    }
    Ok(Injection::evidenced(
        kills,
        "Redis keys lost with the server",
        keys_lost,
    ))
}
