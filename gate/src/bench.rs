//! Benchmark core (filled in below).
