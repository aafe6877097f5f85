//! Deciding whether a buyer gets a pass: the product's eligibility rules first, then the
//! local sold-out mark, the shared quota in Redis, and the per-instance fallback limiter
//! when Redis cannot answer.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use paysaga_common::{
    auth::{BuyerIdentity, MemberId},
    pass::{PassClaims, PassSigner},
};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{
    api::PassIssued,
    batch::Batcher,
    error::{Error, Result},
    health::RedisHealth,
    local::{FallbackAnswer, MarkAnswer, Products},
    store::{IssueOutcome, QuotaStore},
};

/// How a pass came to be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// A new unit of quota, expiring at the given time.
    New(i64),
    /// The member's existing live pass, expiring at the given time.
    Existing(i64),
}

impl Grant {
    pub fn exp(self) -> i64 {
        match self {
            Grant::New(e) | Grant::Existing(e) => e,
        }
    }
}

/// The pass id of `member`'s pass for `product` expiring at `exp`. Derived, not
/// stored: re-deriving it (and re-signing, which is deterministic) hands a member the
/// very same pass again. A member holds one live pass per product and a new one is
/// only issued after the old expired, so the triple, and the id, never repeats.
pub fn pass_id(product_id: i64, member: &str, exp: i64) -> Uuid {
    let mut h = Sha256::new();
    h.update(b"paysaga pass id v1\0");
    h.update(product_id.to_be_bytes());
    h.update(member.as_bytes());
    h.update([0]);
    h.update(exp.to_be_bytes());
    let digest = h.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

pub fn unix_now() -> i64 {
    Utc::now().timestamp()
}

/// Settings the admission path needs.
#[derive(Debug, Clone)]
pub struct Policy {
    pub pass_ttl: Duration,
    pub sold_out_cache: Duration,
    pub fallback_instances: i64,
}

pub struct Gate {
    pub store: QuotaStore,
    pub products: Products,
    pub health: RedisHealth,
    signer: PassSigner,
    policy: Policy,
}

fn outcome(label: &'static str) {
    metrics::counter!("gate_pass_answers_total", "outcome" => label).increment(1);
}

impl Gate {
    pub fn new(store: QuotaStore, signer: PassSigner, policy: Policy) -> Self {
        Self {
            store,
            products: Products::default(),
            health: RedisHealth::new(),
            signer,
            policy,
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The signed pass for a grant.
    pub fn sign(&self, product_id: i64, member: &MemberId, exp: i64) -> PassIssued {
        let claims = PassClaims {
            pid: pass_id(product_id, member.as_str(), exp),
            prd: product_id,
            mem: member.to_string(),
            exp,
        };
        PassIssued {
            pass: self.signer.sign(&claims),
            pass_id: claims.pid,
            product_id,
            member_id: member.clone(),
            expires_at: DateTime::from_timestamp(exp, 0).unwrap_or_default(),
        }
    }

    /// Grants `buyer` a pass for `product_id`, or says why not.
    pub async fn admit(self: &Arc<Self>, product_id: i64, buyer: &BuyerIdentity) -> Result<Grant> {
        let member = &buyer.member;
        let now = unix_now();
        // Only a product listed here has known rules: judged before anything else, so
        // an ineligible member spends no quota and costs no Redis call.
        let Some(listed) = self.products.get(product_id).filter(|l| l.in_catalogue()) else {
            return Err(self.not_listed(product_id).await);
        };
        if let Err(why) = listed.judge(buyer) {
            outcome("ineligible");
            metrics::counter!("gate_ineligible_total", "rule" => why.rule().label()).increment(1);
            return Err(why.into());
        }
        match listed.mark_answer(member.as_str(), Instant::now(), now) {
            Some(MarkAnswer::Holder(exp)) => {
                outcome("existing_cached");
                return Ok(Grant::Existing(exp));
            }
            Some(MarkAnswer::SoldOut) => {
                outcome("sold_out_cached");
                return Err(Error::SoldOut(product_id));
            }
            None => {}
        }
        let exp = now + self.policy.pass_ttl.as_secs() as i64;
        if !self.health.is_degraded() {
            let ttl = self.policy.pass_ttl.as_secs() as i64;
            let batcher = listed
                .batcher
                .get_or_init(|| Batcher::spawn(self.store.clone(), product_id, ttl));
            let answer = match batcher.issue(member.as_str()).await {
                Some(answer) => answer,
                None => {
                    self.store
                        .issue(product_id, member.as_str(), now, exp)
                        .await
                }
            };
            match answer {
                Ok(IssueOutcome::Existing { exp }) => {
                    listed.record(member.as_str(), exp, true);
                    outcome("existing");
                    return Ok(Grant::Existing(exp));
                }
                Ok(IssueOutcome::Issued { exp, remaining }) => {
                    listed.record(member.as_str(), exp, true);
                    listed.set_last_quota(remaining);
                    if remaining <= 0 {
                        self.load_sold_out_mark(product_id);
                    }
                    outcome("issued");
                    return Ok(Grant::New(exp));
                }
                Ok(IssueOutcome::NoQuota) => {
                    listed.set_last_quota(0);
                    self.load_sold_out_mark(product_id);
                    outcome("sold_out");
                    return Err(Error::SoldOut(product_id));
                }
                // Listed, yet Redis holds no quota for it: Redis lost its data.
                Ok(IssueOutcome::Unknown) => {
                    self.health.degrade(&format_args!(
                        "Redis holds no quota for listed product {product_id}"
                    ));
                }
                Err(e) if e.is_redis_outage() => {
                    self.health.degrade(&e);
                }
                Err(e) => return Err(e),
            }
        }
        self.fallback(product_id, member, now, exp)
    }

    /// A product not (yet) in this instance's list: unknown to Redis too is not found;
    /// known there (another instance listed it first) it waits for this instance's next
    /// recompute, which learns its rules, rather than being admitted unjudged.
    async fn not_listed(&self, product_id: i64) -> Error {
        if !self.products.catalogue_loaded() || self.health.is_degraded() {
            return self.unknown_product(product_id);
        }
        match self.store.read(product_id, unix_now()).await {
            Ok(None) => self.unknown_product(product_id),
            Ok(Some(_)) => {
                outcome("not_listed_yet");
                Error::QuotaUnavailable(
                    "this product's terms are not loaded here yet; retry shortly",
                )
            }
            Err(e) if e.is_redis_outage() => {
                self.health.degrade(&e);
                self.unknown_product(product_id)
            }
            Err(e) => e,
        }
    }

    fn unknown_product(&self, product_id: i64) -> Error {
        outcome("unknown_product");
        if self.products.catalogue_loaded() {
            Error::ProductNotFound(product_id)
        } else {
            Error::QuotaUnavailable("the product list has not been loaded yet; retry shortly")
        }
    }

    fn fallback(&self, product_id: i64, member: &MemberId, now: i64, exp: i64) -> Result<Grant> {
        let Some(local) = self.products.get(product_id) else {
            return Err(self.unknown_product(product_id));
        };
        match local.fallback_admit(member.as_str(), now, exp, self.policy.fallback_instances) {
            FallbackAnswer::Existing(exp) => {
                outcome("fallback_existing");
                Ok(Grant::Existing(exp))
            }
            FallbackAnswer::Issued(exp) => {
                outcome("fallback_issued");
                Ok(Grant::New(exp))
            }
            // The order service itself reports no unit left: that is a real answer.
            FallbackAnswer::Exhausted if local.last_available() == Some(0) => {
                outcome("fallback_sold_out");
                Err(Error::SoldOut(product_id))
            }
            FallbackAnswer::Exhausted | FallbackAnswer::Unknown => {
                outcome("fallback_exhausted");
                Err(Error::QuotaUnavailable(
                    "admission is limited while the shared quota is unavailable; retry shortly",
                ))
            }
        }
    }

    /// Loads quota and live holders together and, if still sold out, sets the mark.
    /// At most one load per product runs at a time; buyers never wait for it.
    fn load_sold_out_mark(self: &Arc<Self>, product_id: i64) {
        if self.policy.sold_out_cache.is_zero() {
            return;
        }
        let local = self.products.get_or_insert(product_id);
        if !local.start_loading() {
            return;
        }
        let gate = self.clone();
        let generation = local.mark_generation();
        tokio::spawn(async move {
            match gate.store.snapshot(product_id, unix_now()).await {
                Ok(s) if s.quota == Some(0) => local.set_sold_out_since(
                    generation,
                    Instant::now() + gate.policy.sold_out_cache,
                    s.holders,
                ),
                Ok(_) => local.clear_sold_out(),
                Err(e) if e.is_redis_outage() => {
                    gate.health.degrade(&e);
                }
                Err(e) => {
                    tracing::warn!(product_id, error = %e, "could not load the sold-out snapshot")
                }
            }
            local.finish_loading();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_ids_are_stable_and_distinct() {
        assert_eq!(pass_id(1, "m", 100), pass_id(1, "m", 100));
        assert_ne!(pass_id(1, "m", 100), pass_id(1, "m", 101));
        assert_ne!(pass_id(1, "m", 100), pass_id(2, "m", 100));
        assert_ne!(pass_id(1, "m1", 100), pass_id(1, "m", 1100));
        assert_eq!(pass_id(1, "m", 100).get_version_num(), 8);
    }
}
