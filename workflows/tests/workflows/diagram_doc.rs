//! docs/saga.md embeds the machine's Mermaid diagram; this fails when that copy is stale.

const BEGIN: &str = "<!-- BEGIN GENERATED: workflows::mermaid() -->";
const END: &str = "<!-- END GENERATED -->";

#[test]
fn docs_embed_the_current_diagram() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/saga.md");
    let doc = std::fs::read_to_string(path).expect("docs/saga.md exists");
    let start = doc.find(BEGIN).expect("begin marker") + BEGIN.len();
    let end = doc[start..].find(END).expect("end marker") + start;
    let embedded = doc[start..end].trim();
    let expected = format!("```mermaid\n{}```", workflows::mermaid());
    if embedded != expected {
        panic!(
            "docs/saga.md is stale; replace the text between the markers with:\n\n{expected}\n\n(run `cargo run -p workflows --example mermaid`)"
        );
    }
}
