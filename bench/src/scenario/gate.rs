//! The gate under sustained load, against the HTTP ceiling: pass issuance while quota
//! lasts (every request a new buyer), sold-out answers once it is gone, and what an
//! in-flight pass costs in Redis.

use std::{sync::Arc, time::Duration};

use crate::{
    client::{post_json, send, Buyers},
    error::Result,
    load::{self, Load, Outcome},
    memory,
    stats::RunSummary,
    system::System,
};

/// Passes for distinct buyers of `product`: `pass` (201) or `sold_out_at_gate`.
pub async fn passes(
    load: &Load,
    sys: &System,
    buyers: Buyers,
    product: i64,
    skip: usize,
) -> RunSummary {
    let url: Arc<str> = format!("{}/v1/passes", sys.gate).into();
    let body: Arc<str> = format!(r#"{{"product_id":{product}}}"#).into();
    let http = sys.http.clone();
    load::run(load, move |ctx| {
        let (http, url, buyers, body) =
            (http.clone(), url.clone(), buyers.clone(), body.to_string());
        async move {
            match send(post_json(
                &http,
                &url,
                buyers.token(skip + ctx.seq as usize),
                body,
            ))
            .await
            {
                Ok(r) if r.status == 201 => Outcome::of("pass"),
                Ok(r) if r.status == 409 && r.code().as_deref() == Some("SOLD_OUT") => {
                    Outcome::of("sold_out_at_gate")
                }
                Ok(r) => r.unexpected(),
                Err(o) => o,
            }
        }
    })
    .await
}

/// Redis bytes of the gate's keys (its prefix), divided by the passes in flight.
pub struct PassMemory {
    pub keys: u64,
    pub bytes: u64,
    pub in_flight: i64,
    pub used_memory_delta: i64,
}

pub async fn pass_memory(
    sys: &System,
    redis_url: &str,
    product: i64,
    used_before: u64,
) -> Result<PassMemory> {
    let client = redis::Client::open(redis_url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let (keys, bytes) = memory::redis_prefix_usage(&mut conn, sys.redis_prefix()).await?;
    let info = memory::redis_info(&mut conn).await?;
    let q = sys.quota(product).await?;
    Ok(PassMemory {
        keys,
        bytes,
        in_flight: q.in_flight,
        used_memory_delta: info.used_memory as i64 - used_before as i64,
    })
}

/// The time a fresh product's quota may take to appear (the recompute job's period is
/// 2 s by default).
pub const QUOTA_WAIT: Duration = Duration::from_secs(30);
