//! The scheduled quota recompute: for every product the order service lists, quota =
//! available units - passes in flight, set atomically in Redis. It also returns units
//! of expired passes, restores the shared quota after an outage, and reports drift.

use std::{collections::HashMap, sync::Arc, time::Instant};

use futures::future::join_all;
use paysaga_contracts::OrderClient;
use tokio::sync::Mutex;
use uuid::Uuid;

/// The order service answers at most this many pass ids per question.
const USED_QUERY_LIMIT: usize = 1_000;

/// How long after a failed report before a `SOLD_OUT` answer tries again.
const REPORT_RETRY_AFTER: std::time::Duration = std::time::Duration::from_millis(250);

use crate::{
    admission::{pass_id, unix_now, Gate},
    error::Result,
    local::ProductLocal,
    store::Recomputed,
};

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Products whose quota was set.
    pub recomputed: usize,
    /// Products whose quota could not be set (Redis failed).
    pub failed: usize,
    /// The product list could not be fetched; nothing was recomputed.
    pub catalogue_failed: bool,
    /// Another run was still going; this one did nothing.
    pub skipped: bool,
    /// This run brought the gate back from the fallback limiter.
    pub recovered: bool,
}

pub struct Recompute {
    gate: Arc<Gate>,
    order: OrderClient,
    skew_secs: i64,
    running: Mutex<()>,
}

impl Recompute {
    pub fn new(gate: Arc<Gate>, order: OrderClient, skew_secs: i64) -> Self {
        Self {
            gate,
            order,
            skew_secs,
            running: Mutex::new(()),
        }
    }

    #[tracing::instrument(skip_all)]
    pub async fn run_once(&self) -> RunReport {
        let Ok(_guard) = self.running.try_lock() else {
            return RunReport {
                skipped: true,
                ..RunReport::default()
            };
        };
        let started = Instant::now();
        // Read the clock before asking for availability: any pass that expired before
        // this moment (less the skew) could only have been used before it, so its unit
        // is already counted in the availability we are about to read.
        let cutoff = unix_now() - self.skew_secs;
        let products = match self.order.list_products().await {
            Ok(answer) => answer.body,
            Err(e) => {
                tracing::warn!(error = %e, "quota recompute: product list unavailable; quotas left as they are");
                metrics::counter!("gate_recompute_runs_total", "result" => "catalogue_failed")
                    .increment(1);
                if let Err(e) = self.gate.store.ping().await {
                    self.gate.health.degrade(&e);
                }
                return RunReport {
                    catalogue_failed: true,
                    ..RunReport::default()
                };
            }
        };
        let listed: Vec<(i64, i64)> = products.iter().map(|p| (p.id, p.available)).collect();
        // Rules first: a product is only ever listed here with its rules known.
        self.gate
            .products
            .set_rules(products.iter().map(|p| (p.id, p.eligibility.as_slice())));
        self.gate
            .products
            .set_catalogue(&listed, self.gate.policy().fallback_instances);

        // Every product this instance knows, listed or not, and whatever its recompute
        // below comes to: a mark past its time answers nothing and only holds memory.
        let now = Instant::now();
        for (_, p) in self.gate.products.all() {
            p.forget_expired_mark(now);
        }

        let results = join_all(listed.iter().map(|&(id, _)| self.one(id, cutoff))).await;
        let mut report = RunReport::default();
        for r in results {
            match r {
                Ok(()) => report.recomputed += 1,
                Err(e) => {
                    report.failed += 1;
                    if e.is_redis_outage() {
                        self.gate.health.degrade(&e);
                    } else {
                        tracing::warn!(error = %e, "quota recompute failed for a product");
                    }
                }
            }
        }
        if report.failed == 0 && self.gate.health.recover() {
            for (_, p) in self.gate.products.all() {
                p.reset_fallback();
            }
            report.recovered = true;
        }
        let result = if report.failed == 0 {
            "ok"
        } else {
            "redis_failed"
        };
        metrics::counter!("gate_recompute_runs_total", "result" => result).increment(1);
        metrics::histogram!("gate_recompute_seconds").record(started.elapsed().as_secs_f64());
        report
    }

    /// Which of the product's live passes have made a reservation: their units have
    /// left `available`, so they must not count as in flight as well. Asked before
    /// availability is read, so a pass used in between is counted once too often (the
    /// safe side), never not at all. `None` when the order service cannot say.
    async fn used_members(&self, product_id: i64, live: &[(String, i64)]) -> Option<Vec<String>> {
        let mut by_pass: HashMap<Uuid, &str> = live
            .iter()
            .map(|(member, exp)| (pass_id(product_id, member, *exp), member.as_str()))
            .collect();
        let ids: Vec<Uuid> = by_pass.keys().copied().collect();
        let mut used = Vec::new();
        for chunk in ids.chunks(USED_QUERY_LIMIT) {
            match self.order.used_passes(chunk).await {
                Ok(answer) => used.extend(
                    answer
                        .body
                        .used
                        .iter()
                        .filter_map(|id| by_pass.remove(id))
                        .map(str::to_owned),
                ),
                Err(e) => {
                    tracing::warn!(product_id, error = %e, "quota recompute: used passes unavailable; product skipped");
                    return None;
                }
            }
        }
        Some(used)
    }

    /// Before a `SOLD_OUT` answer: makes sure the order service has this instance's
    /// report of the product's passes in flight made while the quota is 0, so the
    /// buyer's join of the waitlist is accepted (the order service counts the units
    /// promised to those passes as not on sale). Once per product each time its quota
    /// runs out, not per answer; an attempt that fails is not repeated for a while, and
    /// the `SOLD_OUT` stands either way.
    pub async fn ensure_reported(&self, product_id: i64) {
        let Some(local) = self.gate.products.get(product_id) else {
            return;
        };
        if local.sold_out_reported() {
            return;
        }
        let _one = local.recompute.lock().await;
        if local.sold_out_reported() || !local.try_report(Instant::now(), REPORT_RETRY_AFTER) {
            return;
        }
        let cutoff = unix_now() - self.skew_secs;
        if let Err(e) = self.one_locked(product_id, cutoff, &local).await {
            if e.is_redis_outage() {
                self.gate.health.degrade(&e);
            } else {
                tracing::warn!(product_id, error = %e, "report before sold out failed");
            }
        }
        metrics::counter!("gate_sold_out_reports_total").increment(1);
    }

    #[tracing::instrument(skip_all, fields(product_id))]
    async fn one(&self, product_id: i64, cutoff: i64) -> Result<()> {
        let local = self.gate.products.get_or_insert(product_id);
        let _one = local.recompute.lock().await;
        self.one_locked(product_id, cutoff, &local).await
    }

    /// [`Self::one`] under the product's recompute lock: two runs for one product must
    /// not interleave (one's used marks with the other's availability count a used
    /// pass's unit as free).
    async fn one_locked(&self, product_id: i64, cutoff: i64, local: &ProductLocal) -> Result<()> {
        let live = self.gate.store.holders(product_id, cutoff).await?;
        let Some(used) = self.used_members(product_id, &live).await else {
            return Ok(());
        };
        // The passes in flight are reported before availability is read: the units
        // they no longer cover (a pass expired, or its holder could not pay) go to the
        // head of the waitlist there and then, before this quota could count them. A
        // pass used since the used passes were asked for is still reported in flight
        // (the safe side: one unit fewer handed on this run, none handed twice).
        let in_flight = i64::try_from(live.len().saturating_sub(used.len())).unwrap_or(i64::MAX);
        let (available, waiting) = match self.order.report_promises(product_id, in_flight).await {
            Ok(a) => (a.body.available, a.body.waiting),
            Err(e) => {
                tracing::warn!(product_id, error = %e, "quota recompute: availability unavailable; product skipped");
                return Ok(());
            }
        };
        // While anyone waits, a unit that comes back is theirs, never the open sale's.
        let available = if waiting > 0 { 0 } else { available };
        // Coming back from an outage, every live pass this instance issued is written
        // again, not only those issued without Redis: a Redis Cluster replica promoted
        // after its master died may lack the master's last writes (replication is
        // asynchronous), passes this instance issued through Redis among them. Writing
        // a pass Redis still holds changes nothing (`ZADD GT`, same expiry).
        let resync = if self.gate.health.is_degraded() {
            local.live(cutoff)
        } else {
            local.unsynced(cutoff)
        };
        // A write that may raise the quota (units on sale) must not leave a cached
        // SOLD_OUT answering for it once Redis holds it: cleared before the write, set
        // again below if the quota stays 0. With nothing on sale the quota stays 0 and
        // the mark stands.
        if available > 0 {
            local.clear_sold_out();
        }
        let mut r = self
            .gate
            .store
            .recompute(product_id, available, cutoff, unix_now(), &used, &resync)
            .await?;
        let mut written = resync;
        if r.old.is_none() {
            // Redis lost (or never had) this product: put back every live pass this
            // instance issued, so they count as in flight again.
            let live = local.live(cutoff);
            if !live.is_empty() {
                r = self
                    .gate
                    .store
                    .recompute(product_id, available, cutoff, unix_now(), &used, &live)
                    .await?;
                written = live;
            }
        }
        local.synced(&written, cutoff);
        self.apply(product_id, available, in_flight, local, r);
        Ok(())
    }

    fn apply(
        &self,
        product_id: i64,
        available: i64,
        reported: i64,
        local: &ProductLocal,
        r: Recomputed,
    ) {
        let id = product_id.to_string();
        local.set_last_quota(r.new);
        // This run reported the passes in flight before setting the quota; a pass issued
        // in between (more in flight now than reported) leaves its unit on sale at the
        // order service, so the next SOLD_OUT must report again before it is answered.
        local.set_sold_out_reported(r.new == 0 && r.in_flight <= reported);
        if r.new == 0 {
            let until = Instant::now() + self.gate.policy().sold_out_cache;
            if !self.gate.policy().sold_out_cache.is_zero() {
                local.set_sold_out(until, r.holders);
            }
        } else {
            local.clear_sold_out();
        }
        metrics::gauge!("gate_quota", "product_id" => id.clone()).set(r.new as f64);
        metrics::gauge!("gate_in_flight", "product_id" => id.clone()).set(r.in_flight as f64);
        match r.old {
            Some(old) => {
                let drift = r.new - old;
                metrics::gauge!("gate_quota_drift", "product_id" => id).set(drift as f64);
                metrics::counter!("gate_quota_drift_units_total").increment(drift.unsigned_abs());
                if drift != 0 {
                    tracing::info!(
                        product_id,
                        old,
                        new = r.new,
                        in_flight = r.in_flight,
                        available,
                        drift,
                        "quota drift corrected"
                    );
                }
            }
            None => {
                tracing::info!(
                    product_id,
                    new = r.new,
                    in_flight = r.in_flight,
                    available,
                    "quota initialised"
                );
            }
        }
    }
}
