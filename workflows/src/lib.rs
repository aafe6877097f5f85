//! The checkout saga as pure code (placeholder until its issue lands).
