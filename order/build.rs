//! Rebuilds the crate when a migration is added: `sqlx::migrate!` embeds the files it
//! found at compile time, and cargo does not otherwise look at the folder.
fn main() {
    println!("cargo:rerun-if-changed=../migrations/order_service");
}
