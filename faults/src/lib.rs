//! Fault-injection scenarios over the real running system (placeholder until issue 8 lands).
