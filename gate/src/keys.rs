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
}

impl ProductKeys {
    pub fn new(prefix: &str, product_id: i64) -> Self {
        Self {
            quota: format!("{prefix}{{p:{product_id}}}:quota"),
            holders: format!("{prefix}{{p:{product_id}}}:holders"),
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
    }
}
