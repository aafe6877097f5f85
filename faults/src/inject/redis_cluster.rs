//! Scenario 9: a Redis Cluster master lost mid-drop. The gate runs on a cluster of the
//! scenario's own (3 masters, 3 replicas, `cluster-node-timeout` 1 s, no persistence);
//! the master serving the drop's product is SIGKILLed while payments are in flight. The
//! cluster promotes its replica by itself (a `CLUSTER FAILOVER TAKEOVER` is forced only
//! if it has not within 15 s); the gate answers from its fallback limiter meanwhile, and
//! comes back on the promoted replica. The killed node is then started again, empty,
//! and rejoins as the new master's replica, so the next kill finds a replica to promote.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use paysaga_supervisor::ServiceKind;

use super::{Ctx, Injection};
use crate::scenario::MASTERS_FAILED_OVER;

/// How long the cluster may take to promote a replica on its own.
const AUTOMATIC_FAILOVER_WAIT: Duration = Duration::from_secs(15);
/// How long the gate may take to notice the loss, and to answer from Redis again.
const GATE_WAIT: Duration = Duration::from_secs(30);

/// `/readyz`'s `status`, or `None` when it cannot be read.
async fn gate_status(http: &reqwest::Client, gate: &str) -> Option<String> {
    let r = http.get(format!("{gate}/readyz")).send().await.ok()?;
    let body: serde_json::Value = r.json().await.ok()?;
    body["status"].as_str().map(str::to_owned)
}

/// Waits until the gate reports `degraded`, then `ready`; returns the time from `since`
/// to `ready`, or `None` if the gate never showed the outage (it had no call in flight
/// and its job ran after the promotion) or did not come back within [`GATE_WAIT`].
async fn gate_back_on_redis(
    http: &reqwest::Client,
    gate: &str,
    since: Instant,
) -> Option<Duration> {
    let deadline = Instant::now() + GATE_WAIT;
    let mut degraded = false;
    while Instant::now() < deadline {
        match gate_status(http, gate).await.as_deref() {
            Some("degraded") => degraded = true,
            Some("ready") if degraded => return Some(since.elapsed()),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    let gate = ctx.stack.url(ServiceKind::Gate);
    let tag = format!("{{p:{}}}", ctx.product);
    let mut kills = 0;
    let mut failed_over = 0;
    let mut forced = 0;
    let mut gate_back = 0;
    let mut longest_ms = 0;
    let mut longest_promotion_ms = 0;
    while ctx.next_strike().await? {
        let cluster = ctx.redis_cluster("redis-cluster-master-loss")?;
        let slot = cluster.keyslot(&tag).await?;
        let shard = cluster
            .shards()
            .await?
            .into_iter()
            .find(|s| s.serves(slot))
            .with_context(|| format!("no master serves slot {slot}"))?;
        let killed_at = Instant::now();
        cluster.kill(shard.master)?;
        kills += 1;
        let promoted = match cluster
            .wait_promoted(slot, shard.master, AUTOMATIC_FAILOVER_WAIT)
            .await
        {
            Ok(port) => Some(port),
            Err(_) => match shard.replicas.first() {
                Some(&replica) => {
                    forced += 1;
                    cluster.takeover(replica).await?;
                    cluster
                        .wait_promoted(slot, shard.master, AUTOMATIC_FAILOVER_WAIT)
                        .await
                        .ok()
                }
                None => None,
            },
        };
        if promoted.is_some() {
            failed_over += 1;
            longest_promotion_ms = longest_promotion_ms.max(killed_at.elapsed().as_millis());
        }
        if let Some(took) = gate_back_on_redis(&ctx.http, &gate, killed_at).await {
            gate_back += 1;
            longest_ms = longest_ms.max(took.as_millis());
        }
        ctx.redis_cluster("redis-cluster-master-loss")?
            .restart(shard.master)
            .await?;
        ctx.between_strikes().await;
    }
    let ms = |v: u128| i64::try_from(v).unwrap_or(i64::MAX);
    Ok(Injection {
        faults: kills,
        evidence: vec![
            (MASTERS_FAILED_OVER.into(), failed_over),
            (
                "failovers forced with CLUSTER FAILOVER TAKEOVER".into(),
                forced,
            ),
            (
                "longest SIGKILL to replica promoted (ms)".into(),
                ms(longest_promotion_ms),
            ),
            ("gate back on Redis after a kill".into(), gate_back),
            (
                "longest SIGKILL to gate answering from Redis (ms)".into(),
                ms(longest_ms),
            ),
        ],
        ..Injection::default()
    })
}
