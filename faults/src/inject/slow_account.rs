//! Scenario 2: the account service answers debits after the orchestrator's timeout. On
//! orchestrator -> account, the answer to every `POST /v1/debits` is held for 1.5x the
//! timeout: the debit arrives at once and commits, its answer comes too late. Reads
//! (the account check when a payment is accepted, the saga's lookup by operation key)
//! pass untouched, as they would when only the ledger's writes are slow.

use std::time::Duration;

use paysaga_e2e::Link;
use tokio::time::Instant;

use super::{Ctx, Injection};
use crate::scenario::DOWNSTREAM_TIMEOUT;

/// How often the number of payments waiting for their debit is sampled during a pulse.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    let held = DOWNSTREAM_TIMEOUT * 3 / 2;
    let mut pulses = 0;
    let mut most_waiting = 0;
    for i in 0..ctx.plan.repeats {
        if i > 0 {
            if ctx.drop_over() {
                break;
            }
            // Later pulses strike while payments are in flight; the first one is on from
            // the drop's start, so the opening burst of payments meets it.
            ctx.strike_when_in(&["PROCESSING"]).await?;
        }
        ctx.proxy(Link::OrchestratorToAccount)?
            .set_slow_answers(b"POST /v1/debits", held);
        pulses += 1;
        let until = Instant::now() + ctx.plan.fault_for;
        while Instant::now() < until {
            most_waiting = most_waiting.max(ctx.count_in(&["PROCESSING"]).await?);
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
        ctx.proxy(Link::OrchestratorToAccount)?.heal();
        ctx.pause(Duration::from_millis(300), Duration::from_millis(1000))
            .await;
    }
    Ok(Injection {
        faults: pulses,
        evidence: vec![(
            "most payments waiting for a debit during a pulse".into(),
            most_waiting,
        )],
    })
}
