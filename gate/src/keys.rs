//! The Redis key layout. Every key of one product shares the hash tag `{p:<id>}`, so a
//! product's keys live in one Redis Cluster slot and one script may touch them all.

/// The keys of one product under a namespace prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductKeys {
    /// String: passes that may still be issued.
    pub quota: String,
    /// Sorted set: member id -> expiry (unix seconds) of that member's pass. It is at
    /// once the in-flight set (ZCARD) and each member's live pass (ZSCORE); the pass id
    /// is derived from (product, member, expiry), so nothing else is stored per pass.
    pub holders: String,
    /// Sorted set: member id -> expiry of that member's pass, for passes the order
    /// service reports as used by a reservation. A used pass stays in `holders` (the
    /// member keeps getting the same pass back) but no longer counts as in flight: its
    /// unit has left `available`, and counting it twice would undersell the drop.
    pub used: String,
}

impl ProductKeys {
    pub fn new(prefix: &str, product_id: i64) -> Self {
        Self {
            quota: format!("{prefix}{{p:{product_id}}}:quota"),
            holders: format!("{prefix}{{p:{product_id}}}:holders"),
            used: format!("{prefix}{{p:{product_id}}}:used"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = ProductKeys::new("paysaga:", 42);
        assert_eq!(k.quota, "paysaga:{p:42}:quota");
        assert_eq!(k.holders, "paysaga:{p:42}:holders");
        assert_eq!(k.used, "paysaga:{p:42}:used");
    }

    /// Every script takes the keys of one product only (quota, holders, used), so each
    /// call lands in a single Redis Cluster slot; products spread over all slots.
    #[test]
    fn a_products_keys_are_in_one_cluster_slot() {
        use redis::cluster_routing::Slot;
        let mut slots = std::collections::HashSet::new();
        for prefix in ["paysaga:", "t0123456789ab:", ""] {
            for id in [1, 2, 3, 42, 1_000_000, i64::MAX] {
                let k = ProductKeys::new(prefix, id);
                let slot = Slot::for_key(&k.quota);
                assert_eq!(Slot::for_key(&k.holders), slot, "{k:?}");
                assert_eq!(Slot::for_key(&k.used), slot, "{k:?}");
                // The slot is the hash tag's alone: the prefix does not move it.
                assert_eq!(Slot::for_key(format!("{{p:{id}}}")), slot);
                slots.insert(format!("{slot:?}"));
            }
        }
        assert_eq!(slots.len(), 6, "six products, six slots");
    }
}
