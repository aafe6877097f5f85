//! Prints the saga's Mermaid diagram, for pasting into docs/saga.md.

fn main() {
    print!("{}", workflows::mermaid());
}
