//! Scenario 2: the account service answers after the orchestrator's timeout. Latency on
//! orchestrator -> account of 3/4 of the timeout per leg: a debit request arrives (and
//! commits) before the timeout, its answer after it.

use std::time::Duration;

use paysaga_e2e::Link;

use super::{Ctx, Injection};
use crate::scenario::DOWNSTREAM_TIMEOUT;

pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    let latency = DOWNSTREAM_TIMEOUT * 3 / 4;
    let mut pulses = 0;
    let mut waiting_for_debit = 0;
    for i in 0..ctx.plan.repeats {
        if i > 0 && ctx.drop_over() {
            break;
        }
        waiting_for_debit += ctx.strike_when_in(&["PROCESSING"]).await?;
        ctx.proxy(Link::OrchestratorToAccount)?.set_latency(latency);
        pulses += 1;
        tokio::time::sleep(ctx.plan.fault_for).await;
        ctx.proxy(Link::OrchestratorToAccount)?.heal();
        ctx.pause(Duration::from_millis(300), Duration::from_millis(1000))
            .await;
    }
    Ok(Injection {
        faults: pulses,
        evidence: vec![(
            "payments waiting for a debit at a pulse".into(),
            waiting_for_debit,
        )],
    })
}
