//! The order service (placeholder until its issue lands).
