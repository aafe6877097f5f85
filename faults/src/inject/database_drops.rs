//! Scenario 6: PostgreSQL connections dropped under load. Every open connection of the
//! three database-backed services is reset several times per pulse, and new ones are
//! refused for a moment, so pools must notice dead connections and reconnect.

use std::time::{Duration, Instant};

use paysaga_e2e::Link;
use paysaga_supervisor::ServiceKind;

use super::{Ctx, Injection};

const SERVICES: [ServiceKind; 3] = [
    ServiceKind::Account,
    ServiceKind::Order,
    ServiceKind::Orchestrator,
];

/// What the evidence counts: the faults hitting work in progress.
const EVIDENCE: &str = "payments unfinished at a pulse";

pub async fn inject(ctx: &mut Ctx<'_>) -> anyhow::Result<Injection> {
    let mut resets = 0;
    let mut unfinished = 0;
    while ctx.next_strike().await? {
        unfinished += ctx.unfinished().await?;
        let until = Instant::now() + ctx.plan.fault_for;
        let mut refused = false;
        while Instant::now() < until {
            for kind in SERVICES {
                ctx.proxy(Link::Database(kind))?.reset_connections();
            }
            resets += 1;
            // Half-way through, new connections are refused for a moment too.
            if !refused && until.saturating_duration_since(Instant::now()) < ctx.plan.fault_for / 2
            {
                refused = true;
                for kind in SERVICES {
                    ctx.proxy(Link::Database(kind))?.set_refuse(true);
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
                for kind in SERVICES {
                    ctx.proxy(Link::Database(kind))?.set_refuse(false);
                }
            }
            ctx.pause(Duration::from_millis(100), Duration::from_millis(400))
                .await;
        }
        for kind in SERVICES {
            ctx.proxy(Link::Database(kind))?.heal();
        }
        ctx.between_strikes().await;
    }
    Ok(Injection::evidenced(resets, EVIDENCE, unfinished))
}
