//! `cargo run --release -p gate --bin gate-bench`: the gate benchmark (see gate::bench).

fn main() {}
