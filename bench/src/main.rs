//! The flash-sale benchmark (placeholder until its issue lands).

fn main() {
    eprintln!("paysaga-bench: not built yet (see issue 7)");
    std::process::exit(2);
}
