//! The member service: sign-up, sign-in and the buyer tokens every other service verifies.

/// The schema this service owns.
pub const SCHEMA: &str = "member_service";

/// The member process, as the `member` binary and `paysaga service member` both run it.
pub async fn serve_from_env() -> anyhow::Result<()> {
    anyhow::bail!("the member service is not built yet")
}
