//! Scenario 3: the orchestrator -> order link cut while payments are being confirmed,
//! then healed. The first cut outlasts the reservation TTL, so reservations of debited
//! payments expire behind it and the saga must refund them.
//!
//! A payment being confirmed is still PROCESSING in the table (a successful debit's
//! record rides with the confirm's), so the cut is aimed like the crash scenarios' kills:
//! payments PROCESSING or ACCOUNT_DEBITED while the orchestrator's order batch is in flight.

use std::time::Duration;

use paysaga_e2e::Link;

use super::{Aim, Ctx, Injection};
use crate::scenario::PARTITION_RESERVATION_TTL;

/// What the evidence counts: the faults hitting work in progress.
const EVIDENCE: &str = "payments awaiting debit or confirm at a cut";

pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    let mut cuts = 0;
    let mut confirming = 0;
    let mut exported = false;
    let states = ["PROCESSING", "ACCOUNT_DEBITED"];
    for i in 0..ctx.plan.repeats {
        if i > 0 && ctx.drop_over() {
            break;
        }
        ctx.aim(&states, Aim::Batch("order"), &mut exported).await?;
        ctx.proxy(Link::OrchestratorToOrder)?.cut();
        cuts += 1;
        confirming += ctx.count_in(&states).await?;
        let period = if i == 0 {
            (PARTITION_RESERVATION_TTL + Duration::from_secs(2)).max(ctx.plan.fault_for)
        } else {
            ctx.plan.fault_for
        };
        tokio::time::sleep(period).await;
        ctx.heal_then_wait(Link::OrchestratorToOrder).await?;
    }
    Ok(Injection::evidenced(cuts, EVIDENCE, confirming))
}
