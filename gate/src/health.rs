//! Whether the shared quota (Redis) is usable, changed only on transitions so the log
//! says it once per outage, not once per request.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Mutex,
};

#[derive(Debug, Default)]
pub struct RedisHealth {
    degraded: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl RedisHealth {
    pub fn new() -> Self {
        metrics::gauge!("gate_redis_degraded").set(0.0);
        Self::default()
    }

    pub fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Acquire)
    }

    pub fn reason(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Switches to the fallback limiter; returns whether this call made the switch.
    pub fn degrade(&self, reason: &dyn std::fmt::Display) -> bool {
        if self.degraded.swap(true, Ordering::AcqRel) {
            return false;
        }
        let reason = reason.to_string();
        tracing::warn!(%reason, "shared quota unavailable: answering with the per-instance fallback limiter");
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
        metrics::gauge!("gate_redis_degraded").set(1.0);
        metrics::counter!("gate_redis_transitions_total", "to" => "degraded").increment(1);
        true
    }

    /// Back on the shared quota; returns whether this call made the switch.
    pub fn recover(&self) -> bool {
        if !self.degraded.swap(false, Ordering::AcqRel) {
            return false;
        }
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = None;
        tracing::info!("shared quota restored: Redis reachable and recomputed");
        metrics::gauge!("gate_redis_degraded").set(0.0);
        metrics::counter!("gate_redis_transitions_total", "to" => "ready").increment(1);
        true
    }
}
