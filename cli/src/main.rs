//! The paysaga command (placeholder until its issue lands).

fn main() {
    eprintln!("paysaga: the run command is not built yet (see issue 6)");
    std::process::exit(2);
}
