//! The checkout saga as pure code: states, step outcomes, the one transition
//! function, per-step retry policy and a Mermaid rendering. No I/O.
//!
//! A payment is at a [`Position`]: its [`State`] (exactly the seven of docs/ARCHITECTURE.md)
//! plus the [`Action`] still owed in that state, if any. [`transition`] takes the
//! outcome of that action and says where to go next.

mod machine;
mod mermaid;
mod retry;
mod state;

pub use machine::{request_refund, transition, IllegalTransition, Next, Position};
pub use mermaid::mermaid;
pub use retry::{Jitter, RetryPolicy};
pub use state::{Action, Outcome, ParseError, State};
