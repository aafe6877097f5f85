//! The orchestrator service (placeholder until its issue lands).
