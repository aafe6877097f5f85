//! Scenario 4: the account service SIGKILLed mid-drop, repeatedly, and restarted.

use paysaga_e2e::ServiceKind;

use super::{Ctx, Injection};

/// Kills while some payment waits for its debit, so a debit is cut in flight.
pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    ctx.kill_repeatedly(ServiceKind::Account, &["PROCESSING"])
        .await
}
