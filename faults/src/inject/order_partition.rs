//! Scenario 3: the orchestrator -> order link cut while payments are being confirmed,
//! then healed. The first cut outlasts the reservation TTL, so reservations of debited
//! payments expire behind it and the saga must refund them.

use std::time::Duration;

use paysaga_e2e::Link;

use super::{Ctx, Injection};
use crate::scenario::PARTITION_RESERVATION_TTL;

pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    let mut cuts = 0;
    let mut confirming = 0;
    for i in 0..ctx.plan.repeats {
        if i > 0 && ctx.drop_over() {
            break;
        }
        confirming += ctx.strike_when_in(&["ACCOUNT_DEBITED"]).await?;
        ctx.proxy(Link::OrchestratorToOrder)?.cut();
        cuts += 1;
        let period = if i == 0 {
            (PARTITION_RESERVATION_TTL + Duration::from_secs(2)).max(ctx.plan.fault_for)
        } else {
            ctx.plan.fault_for
        };
        tokio::time::sleep(period).await;
        ctx.proxy(Link::OrchestratorToOrder)?.heal();
        ctx.pause(Duration::from_millis(300), Duration::from_millis(1000))
            .await;
    }
    Ok(Injection {
        faults: cuts,
        evidence: vec![("payments awaiting confirm at a cut".into(), confirming)],
    })
}
