//! Claim strategies compared (placeholder).
