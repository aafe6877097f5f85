//! Harness for end-to-end tests (placeholder until its issue lands).
