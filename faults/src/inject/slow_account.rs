//! Scenario 2: the account service answers after the orchestrator's timeout, in two
//! forms. First, from the drop's start, the answer to every request carrying a debit on
//! orchestrator -> account (a `POST /v1/batch` with a debit operation) is held for 1.5x
//! the timeout while batches of reads only pass: the debit commits, its answer is late,
//! and the saga's lookup by operation key finds it at once.
//! Later pulses slow the whole link (3/4 of the timeout per leg), the lookup included,
//! so the outcome stays unknown until the pulse ends and the saga retries later.

use std::time::Duration;

use paysaga_e2e::Link;
use tokio::time::Instant;

use super::{Ctx, Injection};
use crate::scenario::DOWNSTREAM_TIMEOUT;

/// What a debit looks like inside a batch on the wire (`AccountOp`, tagged by `op`).
const DEBIT_OP: &[u8] = br#""op":"debit""#;

/// How often the number of payments waiting for their debit is sampled during a pulse.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// What the evidence counts: the faults hitting work in progress.
const EVIDENCE: &str = "most payments waiting for a debit during a pulse";

pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    let held = DOWNSTREAM_TIMEOUT * 3 / 2;
    let per_leg = DOWNSTREAM_TIMEOUT * 3 / 4;
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
        let link = ctx.proxy(Link::OrchestratorToAccount)?;
        if i == 0 {
            link.set_slow_answers(DEBIT_OP, held);
        } else {
            link.set_latency(per_leg);
        }
        pulses += 1;
        let until = Instant::now() + ctx.plan.fault_for;
        while Instant::now() < until {
            most_waiting = most_waiting.max(ctx.count_in(&["PROCESSING"]).await?);
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
        ctx.heal_then_wait(Link::OrchestratorToAccount).await?;
    }
    Ok(Injection::evidenced(pulses, EVIDENCE, most_waiting))
}
