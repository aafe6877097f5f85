//! Scenario 1: the orchestrator SIGKILLed mid-drop, repeatedly, and restarted.

use paysaga_supervisor::ServiceKind;

use super::{Aim, Ctx, Injection};

/// Kills while sagas are between steps (any unfinished state will do) and, once the
/// orchestrator batches, while any of its batches is in flight: downstream calls sent and
/// unanswered, or its own group-committed writes (`saga_writes`) not yet acknowledged.
pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    ctx.kill_repeatedly(
        ServiceKind::Orchestrator,
        &["PROCESSING", "ACCOUNT_DEBITED", "ORDER_CONFIRMED"],
        Aim::AnyBatch,
    )
    .await
}
