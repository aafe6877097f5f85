//! Scenario 8: the order service SIGKILLed mid-drop, repeatedly, and restarted, while
//! payments are being confirmed.

use paysaga_supervisor::ServiceKind;

use super::{Aim, Ctx, Injection};

/// Kills while payments wait for their confirm and the orchestrator's order batch is in
/// flight: the order service dies inside the transaction confirming them, so each
/// confirm batch is committed or not as a whole, and the saga has to find out which by
/// looking the reservations up. A payment being confirmed is still PROCESSING in the
/// table (a successful debit's record rides with the confirm's), ACCOUNT_DEBITED only
/// once a confirm has gone unanswered.
pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    ctx.kill_repeatedly(
        ServiceKind::Order,
        &["PROCESSING", "ACCOUNT_DEBITED"],
        Aim::Batch("order"),
    )
    .await
}
