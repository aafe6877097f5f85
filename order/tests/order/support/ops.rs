//! One batch operation on a reservation, built by name: the batch and settle tests
//! write their operation lists with these.

use paysaga_contracts::order::api::OrderOp;
use uuid::Uuid;

pub fn confirm(id: Uuid) -> OrderOp {
    OrderOp::Confirm { reservation_id: id }
}

pub fn cancel(id: Uuid) -> OrderOp {
    OrderOp::Cancel { reservation_id: id }
}

pub fn lookup(id: Uuid) -> OrderOp {
    OrderOp::Reservation { reservation_id: id }
}
