//! What one gate instance knows on its own, per product: the short-lived sold-out mark,
//! the last quota and availability it saw, and the passes it issued (to answer a
//! repeated request without Redis, to run the fallback limiter, and to put passes back
//! into a Redis that lost them).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
        Arc, Mutex, OnceLock, RwLock,
    },
    time::Instant,
};

use paysaga_common::auth::BuyerIdentity;
use paysaga_contracts::eligibility::{self, EligibilityRule, Ineligible, MemberFacts};

use crate::batch::Batcher;

const UNKNOWN: i64 = i64::MIN;

/// "Sold out" as Redis last said it, with the passes that were live at that moment so
/// their holders still get their own pass back while the mark answers for Redis.
#[derive(Debug)]
pub struct SoldOutMark {
    pub until: Instant,
    pub holders: HashMap<String, i64>,
}

/// The answer a fresh sold-out mark gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkAnswer {
    /// The member holds a live pass expiring at this time.
    Holder(i64),
    SoldOut,
}

/// What the fallback limiter decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackAnswer {
    Existing(i64),
    Issued(i64),
    /// This instance's share of the last known quota is used up.
    Exhausted,
    /// Neither a quota nor an availability was ever seen for the product.
    Unknown,
}

#[derive(Debug, Clone, Copy)]
struct LocalPass {
    exp: i64,
    /// Whether Redis is known to hold it (issued through the shared quota).
    synced: bool,
}

#[derive(Debug, Default)]
struct Passes {
    by_member: HashMap<String, LocalPass>,
    /// Passes the fallback limiter may still issue during the current outage; fixed
    /// when the outage is first noticed for this product.
    fallback_budget: Option<i64>,
}

#[derive(Debug)]
pub struct ProductLocal {
    sold_out: RwLock<Option<Arc<SoldOutMark>>>,
    /// Bumped by every clear of the mark (under its write lock), so a snapshot read
    /// before a recompute raised the quota cannot set a mark after it.
    mark_generation: AtomicU64,
    loading: AtomicBool,
    last_quota: AtomicI64,
    last_available: AtomicI64,
    in_catalogue: AtomicBool,
    passes: Mutex<Passes>,
    /// Who may take part, from the order service's product list (set before the
    /// product is marked listed, so a listed product's rules are always known).
    eligibility: RwLock<Vec<EligibilityRule>>,
    /// This product's issue batching task, started on first use.
    pub batcher: OnceLock<Batcher>,
    /// Whether the order service has this instance's report of the passes in flight
    /// made while the quota is 0 (so a buyer told `SOLD_OUT` can join the waitlist).
    sold_out_reported: AtomicBool,
    /// When this instance last reported the product before a `SOLD_OUT` answer.
    report_tried: Mutex<Option<Instant>>,
    /// One recompute (and report) of the product at a time in this instance.
    pub recompute: tokio::sync::Mutex<()>,
}

impl Default for ProductLocal {
    fn default() -> Self {
        Self {
            sold_out: RwLock::new(None),
            mark_generation: AtomicU64::new(0),
            loading: AtomicBool::new(false),
            last_quota: AtomicI64::new(UNKNOWN),
            last_available: AtomicI64::new(UNKNOWN),
            in_catalogue: AtomicBool::new(false),
            passes: Mutex::new(Passes::default()),
            eligibility: RwLock::new(Vec::new()),
            batcher: OnceLock::new(),
            sold_out_reported: AtomicBool::new(false),
            report_tried: Mutex::new(None),
            recompute: tokio::sync::Mutex::new(()),
        }
    }
}

fn known(v: i64) -> Option<i64> {
    (v != UNKNOWN).then_some(v)
}

impl ProductLocal {
    /// `None` when no fresh mark exists and Redis must be asked.
    pub fn mark_answer(&self, member: &str, now: Instant, now_secs: i64) -> Option<MarkAnswer> {
        let guard = self.sold_out.read().unwrap_or_else(|p| p.into_inner());
        let mark = guard.as_ref().filter(|m| m.until > now)?;
        match mark.holders.get(member) {
            Some(&exp) if exp > now_secs => Some(MarkAnswer::Holder(exp)),
            _ => Some(MarkAnswer::SoldOut),
        }
    }

    pub fn set_sold_out(&self, until: Instant, holders: Vec<(String, i64)>) {
        let mark = Arc::new(SoldOutMark {
            until,
            holders: holders.into_iter().collect(),
        });
        *self.sold_out.write().unwrap_or_else(|p| p.into_inner()) = Some(mark);
    }

    /// Sets the mark from a snapshot read after [`Self::mark_generation`] returned
    /// `generation`; a clear since then (a recompute that may have raised the quota)
    /// wins, and the mark is not set.
    pub fn set_sold_out_since(&self, generation: u64, until: Instant, holders: Vec<(String, i64)>) {
        let mut guard = self.sold_out.write().unwrap_or_else(|p| p.into_inner());
        if self.mark_generation.load(Ordering::Acquire) == generation {
            *guard = Some(Arc::new(SoldOutMark {
                until,
                holders: holders.into_iter().collect(),
            }));
        }
    }

    pub fn clear_sold_out(&self) {
        let mut guard = self.sold_out.write().unwrap_or_else(|p| p.into_inner());
        *guard = None;
        self.mark_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Drops a mark whose time has passed: it answers nothing more, and it would keep
    /// the holders of a drop long over (a map of thousands) until the product's next
    /// sold-out answer. No clear: a load in flight may still set a fresh mark, as it
    /// would have replaced this one.
    pub fn forget_expired_mark(&self, now: Instant) {
        let mut guard = self.sold_out.write().unwrap_or_else(|p| p.into_inner());
        if guard.as_ref().is_some_and(|m| m.until <= now) {
            *guard = None;
        }
    }

    pub fn mark_generation(&self) -> u64 {
        self.mark_generation.load(Ordering::Acquire)
    }

    pub fn has_mark(&self) -> bool {
        self.sold_out
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Claims the right to load a snapshot; false when a load is already running.
    pub fn start_loading(&self) -> bool {
        !self.loading.swap(true, Ordering::AcqRel)
    }

    pub fn finish_loading(&self) {
        self.loading.store(false, Ordering::Release);
    }

    pub fn sold_out_reported(&self) -> bool {
        self.sold_out_reported.load(Ordering::Acquire)
    }

    /// Set by a recompute that reported the passes in flight: true when it left the
    /// quota at 0.
    pub fn set_sold_out_reported(&self, reported: bool) {
        self.sold_out_reported.store(reported, Ordering::Release);
    }

    /// Claims a report attempt before a `SOLD_OUT` answer; false when one was tried
    /// less than `every` ago (the order service may be down: answers do not queue on it).
    pub fn try_report(&self, now: Instant, every: std::time::Duration) -> bool {
        let mut last = self.report_tried.lock().unwrap_or_else(|p| p.into_inner());
        match *last {
            Some(t) if now.duration_since(t) < every => false,
            _ => {
                *last = Some(now);
                true
            }
        }
    }

    pub fn last_quota(&self) -> Option<i64> {
        known(self.last_quota.load(Ordering::Relaxed))
    }

    pub fn set_last_quota(&self, q: i64) {
        self.last_quota.store(q, Ordering::Relaxed);
    }

    pub fn last_available(&self) -> Option<i64> {
        known(self.last_available.load(Ordering::Relaxed))
    }

    /// Judges `buyer` against the product's rules ([`eligibility::judge`]).
    pub fn judge(&self, buyer: &BuyerIdentity) -> Result<(), Ineligible> {
        let rules = self.eligibility.read().unwrap_or_else(|p| p.into_inner());
        if rules.is_empty() {
            return Ok(());
        }
        eligibility::judge(&rules, &MemberFacts::of(buyer))
    }

    fn set_eligibility(&self, rules: &[EligibilityRule]) {
        let mut held = self.eligibility.write().unwrap_or_else(|p| p.into_inner());
        if *held != rules {
            *held = rules.to_vec();
        }
    }

    pub fn in_catalogue(&self) -> bool {
        self.in_catalogue.load(Ordering::Relaxed)
    }

    fn passes(&self) -> std::sync::MutexGuard<'_, Passes> {
        self.passes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers a pass this instance handed out.
    pub fn record(&self, member: &str, exp: i64, synced: bool) {
        let mut p = self.passes();
        let entry = p
            .by_member
            .entry(member.to_owned())
            .or_insert(LocalPass { exp, synced });
        if exp >= entry.exp {
            *entry = LocalPass {
                exp,
                synced: synced || (entry.synced && entry.exp == exp),
            };
        }
    }

    /// The fallback limiter: at most `min(last quota, last availability) / instances`
    /// passes per outage, and the member's own live pass again if it has one.
    pub fn fallback_admit(
        &self,
        member: &str,
        now: i64,
        exp: i64,
        instances: i64,
    ) -> FallbackAnswer {
        let mut p = self.passes();
        if let Some(held) = p.by_member.get(member).filter(|h| h.exp > now) {
            return FallbackAnswer::Existing(held.exp);
        }
        let budget = match p.fallback_budget {
            Some(b) => b,
            None => {
                let base = match (self.last_quota(), self.last_available()) {
                    (Some(q), Some(a)) => q.min(a),
                    (Some(q), None) => q,
                    (None, Some(a)) => a,
                    (None, None) => return FallbackAnswer::Unknown,
                };
                let b = base.max(0) / instances.max(1);
                p.fallback_budget = Some(b);
                b
            }
        };
        if budget <= 0 {
            return FallbackAnswer::Exhausted;
        }
        p.fallback_budget = Some(budget - 1);
        p.by_member
            .insert(member.to_owned(), LocalPass { exp, synced: false });
        FallbackAnswer::Issued(exp)
    }

    /// Lowers the outage budget when the order service reports fewer units than it
    /// allows (units reserved meanwhile); it never raises it.
    pub fn clamp_fallback(&self, available: i64, instances: i64) {
        let mut p = self.passes();
        if let Some(b) = p.fallback_budget {
            p.fallback_budget = Some(b.min(available.max(0) / instances.max(1)));
        }
    }

    /// Forgets the outage budget once Redis is back.
    pub fn reset_fallback(&self) {
        self.passes().fallback_budget = None;
    }

    /// Live passes Redis may not hold (issued by the fallback limiter).
    pub fn unsynced(&self, cutoff: i64) -> Vec<(String, i64)> {
        self.passes()
            .by_member
            .iter()
            .filter(|(_, p)| !p.synced && p.exp >= cutoff)
            .map(|(m, p)| (m.clone(), p.exp))
            .collect()
    }

    /// Every live pass this instance issued.
    pub fn live(&self, cutoff: i64) -> Vec<(String, i64)> {
        self.passes()
            .by_member
            .iter()
            .filter(|(_, p)| p.exp >= cutoff)
            .map(|(m, p)| (m.clone(), p.exp))
            .collect()
    }

    /// Marks passes as held by Redis and drops those that can no longer be used.
    pub fn synced(&self, written: &[(String, i64)], cutoff: i64) {
        let mut p = self.passes();
        for (m, exp) in written {
            if let Some(lp) = p.by_member.get_mut(m) {
                if lp.exp == *exp {
                    lp.synced = true;
                }
            }
        }
        p.by_member.retain(|_, lp| lp.exp >= cutoff);
        // A drop's crowd leaves the map at its peak capacity once their passes expire:
        // give it back, so memory follows the passes live now, not the largest drop so
        // far (each product keeps a map of its own).
        let len = p.by_member.len();
        if p.by_member.capacity() > 2 * len + 64 {
            p.by_member.shrink_to(2 * len);
        }
    }

    /// Room the pass map holds (tests).
    #[cfg(test)]
    fn pass_capacity(&self) -> usize {
        self.passes().by_member.capacity()
    }
}

/// Every product this instance has heard of, from the order service's list or from a
/// Redis answer; never from a buyer's request alone, so the map cannot be inflated.
#[derive(Debug, Default)]
pub struct Products {
    map: RwLock<HashMap<i64, Arc<ProductLocal>>>,
    catalogue_loaded: AtomicBool,
}

impl Products {
    pub fn get(&self, id: i64) -> Option<Arc<ProductLocal>> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    pub fn get_or_insert(&self, id: i64) -> Arc<ProductLocal> {
        if let Some(p) = self.get(id) {
            return p;
        }
        self.map
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id)
            .or_default()
            .clone()
    }

    /// Records each listed product's eligibility rules; called before
    /// [`Products::set_catalogue`] marks them listed.
    pub fn set_rules<'a>(&self, products: impl IntoIterator<Item = (i64, &'a [EligibilityRule])>) {
        for (id, rules) in products {
            self.get_or_insert(id).set_eligibility(rules);
        }
    }

    /// Records the order service's product list with each product's availability.
    pub fn set_catalogue(&self, products: &[(i64, i64)], instances: i64) {
        let listed: HashMap<i64, i64> = products.iter().copied().collect();
        for (id, available) in products {
            let p = self.get_or_insert(*id);
            p.last_available.store(*available, Ordering::Relaxed);
            p.in_catalogue.store(true, Ordering::Relaxed);
            p.clamp_fallback(*available, instances);
        }
        for (id, p) in self.all() {
            if !listed.contains_key(&id) {
                p.in_catalogue.store(false, Ordering::Relaxed);
            }
        }
        self.catalogue_loaded.store(true, Ordering::Release);
    }

    pub fn catalogue_loaded(&self) -> bool {
        self.catalogue_loaded.load(Ordering::Acquire)
    }

    pub fn all(&self) -> Vec<(i64, Arc<ProductLocal>)> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fallback_admits_at_most_its_share_and_repeats_a_members_pass() {
        let p = ProductLocal::default();
        p.set_last_quota(10);
        p.last_available.store(7, Ordering::Relaxed);
        let mut issued = 0;
        for i in 0..20 {
            if let FallbackAnswer::Issued(_) = p.fallback_admit(&format!("m{i}"), 100, 160, 2) {
                issued += 1;
            }
        }
        assert_eq!(issued, 3, "min(10, 7) / 2 instances");
        assert_eq!(
            p.fallback_admit("m0", 100, 170, 2),
            FallbackAnswer::Existing(160)
        );
        assert_eq!(
            p.fallback_admit("m19", 100, 170, 2),
            FallbackAnswer::Exhausted
        );
        assert_eq!(p.unsynced(0).len(), 3);
        p.synced(&p.unsynced(0), 0);
        assert!(p.unsynced(0).is_empty());
    }

    #[test]
    fn a_drops_passes_give_their_room_back_once_expired() {
        let p = ProductLocal::default();
        for i in 0..10_000 {
            p.record(&format!("m{i}"), 100, true);
        }
        let peak = p.pass_capacity();
        assert!(peak >= 10_000);
        p.record("late", 500, true);
        // Every pass but the late one has expired by 200.
        p.synced(&[], 200);
        assert_eq!(p.live(0), vec![("late".to_owned(), 500)]);
        assert!(
            p.pass_capacity() < 100,
            "{} of {peak} kept",
            p.pass_capacity()
        );
    }

    #[test]
    fn fallback_without_any_knowledge_is_unknown_not_sold_out() {
        let p = ProductLocal::default();
        assert_eq!(p.fallback_admit("m", 1, 2, 1), FallbackAnswer::Unknown);
    }

    #[test]
    fn mark_answers_holders_with_their_pass_and_expires() {
        let p = ProductLocal::default();
        let now = Instant::now();
        p.set_sold_out(now + Duration::from_secs(1), vec![("alice".into(), 200)]);
        assert_eq!(
            p.mark_answer("alice", now, 100),
            Some(MarkAnswer::Holder(200))
        );
        assert_eq!(p.mark_answer("bob", now, 100), Some(MarkAnswer::SoldOut));
        assert_eq!(
            p.mark_answer("alice", now, 200),
            Some(MarkAnswer::SoldOut),
            "an expired pass is not handed out"
        );
        assert_eq!(
            p.mark_answer("bob", now + Duration::from_secs(2), 100),
            None
        );
        p.clear_sold_out();
        assert_eq!(p.mark_answer("bob", now, 100), None);
    }

    #[test]
    fn an_expired_mark_is_forgotten_and_a_fresh_one_kept() {
        let p = ProductLocal::default();
        let now = Instant::now();
        let crowd: Vec<(String, i64)> = (0..1_000).map(|i| (format!("m{i}"), 100)).collect();
        p.set_sold_out(now + Duration::from_millis(250), crowd);
        p.forget_expired_mark(now);
        assert!(p.has_mark(), "a mark still answering is kept");
        p.forget_expired_mark(now + Duration::from_millis(250));
        assert!(
            !p.has_mark(),
            "a mark past its time is dropped, holders and all"
        );
        let generation = p.mark_generation();
        p.forget_expired_mark(now + Duration::from_secs(1));
        assert_eq!(p.mark_generation(), generation, "forgetting is not a clear");
    }

    #[test]
    fn a_snapshot_read_before_a_clear_sets_no_mark() {
        let p = ProductLocal::default();
        let now = Instant::now();
        let read_at = p.mark_generation();
        // A recompute raises the quota between the snapshot's read and its mark.
        p.clear_sold_out();
        p.set_sold_out_since(read_at, now + Duration::from_secs(1), vec![]);
        assert_eq!(
            p.mark_answer("bob", now, 100),
            None,
            "the stale snapshot lost"
        );
        p.set_sold_out_since(p.mark_generation(), now + Duration::from_secs(1), vec![]);
        assert_eq!(p.mark_answer("bob", now, 100), Some(MarkAnswer::SoldOut));
    }
}
