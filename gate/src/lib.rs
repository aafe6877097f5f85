//! The gate service (placeholder until its issue lands).
