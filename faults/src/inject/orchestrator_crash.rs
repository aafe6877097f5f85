//! Scenario 1: the orchestrator SIGKILLed mid-drop, repeatedly, and restarted.

use paysaga_e2e::ServiceKind;

use super::{Ctx, Injection};

/// Kills while sagas are between steps: any unfinished state will do.
pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    ctx.kill_repeatedly(
        ServiceKind::Orchestrator,
        &["PROCESSING", "ACCOUNT_DEBITED", "ORDER_CONFIRMED"],
    )
    .await
}
