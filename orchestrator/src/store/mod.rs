//! Payments in PostgreSQL, one module per concern: the row and its decoding (`row`),
//! creation and loading (`payments`), leases and recovery claims (`leases`), the
//! compare-and-set step record and the step log (`steps`), the operator's listing and
//! counts (`listing`), the group-committed writer (`group`), and the refund approvals
//! of four eyes (`approvals`). Every write is one short transaction.

pub mod approvals;
mod group;
mod leases;
mod listing;
mod payments;
mod row;
mod series;
mod steps;

pub use group::Writes;
pub use leases::{claim_due, claim_one, release};
pub use listing::{census, list, product_census, traceparent, Census, ProductCensus};
pub use payments::{
    by_reservation, explain_missing, insert_linked_payment, insert_many, load, Linked, NewPayment,
};
pub use row::PaymentRow;
pub use series::{drop_series, MAX_BUCKETS};
pub use steps::{
    operator_move, record_many, record_step, record_steps, steps, Answer, Move, Recorded,
    Recording, StepMove, StepRecord,
};
