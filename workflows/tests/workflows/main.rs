//! The saga machine's tests: its properties and the diagram in the docs.

mod diagram_doc;
mod machine_props;
