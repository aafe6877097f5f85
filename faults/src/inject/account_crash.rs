//! Scenario 4: the account service SIGKILLed mid-drop, repeatedly, and restarted.

use paysaga_supervisor::ServiceKind;

use super::{Aim, Ctx, Injection};

/// Kills while some payment waits for its debit and, once the orchestrator batches its
/// account calls, while one of those batches is in flight: the ledger dies inside the
/// transaction that carries it.
pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    ctx.kill_repeatedly(ServiceKind::Account, &["PROCESSING"], Aim::Batch("account"))
        .await
}
