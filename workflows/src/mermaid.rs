//! Renders the machine as a Mermaid state diagram, derived from [`transition`] itself
//! so the picture cannot drift from the code.

use crate::{
    machine::{request_refund, transition, Next, Position},
    state::{Outcome, State},
};

/// The saga as a `stateDiagram-v2`. Edges are every (position, outcome) the machine
/// accepts, merged per (from, to) pair; self-loops are retries, follow-up steps and
/// escalations.
pub fn mermaid() -> String {
    let mut edges: Vec<(State, State, Vec<String>)> = Vec::new();
    let mut add = |from: State, to: State, label: String| match edges
        .iter_mut()
        .find(|(f, t, _)| *f == from && *t == to)
    {
        Some((_, _, labels)) => labels.push(label),
        None => edges.push((from, to, vec![label])),
    };
    for p in Position::REACHABLE {
        let Some(action) = p.pending() else { continue };
        for outcome in Outcome::ALL {
            let verb = outcome.as_str().to_lowercase();
            match transition(p, outcome) {
                Ok(Next::Move(to)) => add(p.state(), to.state(), format!("{action} {verb}")),
                Ok(Next::Retry) => add(
                    p.state(),
                    p.state(),
                    format!("{action} {verb}: retry same key"),
                ),
                Ok(Next::Escalate) => {
                    add(p.state(), p.state(), format!("{action} {verb}: operator"))
                }
                Err(_) => {}
            }
        }
    }
    for p in Position::REACHABLE.into_iter().filter(|p| p.is_settled()) {
        if let Ok(to) = request_refund(p) {
            add(p.state(), to.state(), "operator refund".into());
        }
    }

    let mut out = String::from("stateDiagram-v2\n");
    out.push_str(&format!("    [*] --> {}\n", Position::start().state()));
    for (from, to, labels) in &edges {
        out.push_str(&format!("    {from} --> {to} : {}\n", labels.join(" / ")));
    }
    for s in State::ALL.into_iter().filter(|s| s.is_terminal()) {
        out.push_str(&format!("    {s} --> [*]\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_appears() {
        let m = mermaid();
        for s in State::ALL {
            assert!(m.contains(s.as_str()), "{s} missing from\n{m}");
        }
        assert!(m.contains("PROCESSING --> FAILED : DEBIT rejected"));
        assert!(m.contains("COMPLETED --> REFUND_PROCESSING : operator refund"));
    }
}
