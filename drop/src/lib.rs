//! A drop played against running paysaga services, through their public APIs only: set
//! up by an operator ([`setup`]: a product, buyers signed up and funded), bought by
//! well-behaved buyers ([`buyer`]: pass, reservation, payment, the waitlist after
//! SOLD_OUT), attacked by scripted bots ([`bots`]), and read back from PostgreSQL ([`sell_through`] for one product,
//! [`invariants`] for the whole system). Played by the `paysaga` demo, the end-to-end
//! tests, the benchmark and the fault suite alike.

pub mod bots;
pub mod buyer;
pub mod invariants;
pub mod sell_through;
pub mod setup;
pub mod stats;

pub use buyer::{
    Attempt, Buyer, Driver, Endpoints, ErrorLog, Outcome, Patience, WaitEnd, WaitlistPolicy,
    Waitlisted,
};
pub use invariants::InvariantReport;
pub use setup::Admin;
