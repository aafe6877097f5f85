//! The account service (placeholder until its issue lands).
