//! Creating a payment together with its idempotency record, and loading one.

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;
use workflows::{Action, Position};

use super::{constraint, millis, PaymentRow, PAYMENT_COLUMNS};
use crate::{
    error::{Error, Result},
    idempotency::Scope,
};

/// A new payment's facts, checked with the downstreams before it is stored.
#[derive(Debug, Clone)]
pub struct NewPayment {
    pub id: Uuid,
    pub member_id: String,
    pub account_id: i64,
    pub reservation_id: Uuid,
    pub amount: i64,
}

/// Inserts a payment in PROCESSING, owing the debit, leased to `driver` so nobody
/// else starts it and due at once for recovery should the driver die, and links it to
/// the idempotency record that asked for it. One statement: a payment without its
/// record is never committed, and `None` (nothing written) means `token` no longer
/// owns the key (its lease was taken over; the new owner creates the payment).
pub async fn insert_linked_payment(
    pool: &PgPool,
    new: &NewPayment,
    driver: Uuid,
    lease: Duration,
    scope: &Scope,
    token: Uuid,
) -> Result<Option<PaymentRow>> {
    let start = Position::start();
    // The key's row is updated before the payment row exists, but the foreign key is
    // checked at the end of the statement, when both do.
    let sql = format!(
        r#"
        WITH linked AS (
            UPDATE idempotency_keys
            SET payment_id = $1, updated_at = now()
            WHERE member_id = $10 AND operation = $11 AND idem_key = $12 AND owner_token = $13
              AND status = 'PROCESSING'
            RETURNING payment_id
        )
        INSERT INTO payments (id, member_id, account_id, reservation_id, amount, state, pending_action,
                              next_attempt_at, lease_owner, lease_until)
        SELECT linked.payment_id, $2, $3, $4, $5, $6, $7, now(), $8, now() + $9 * INTERVAL '1 millisecond'
        FROM linked
        RETURNING {PAYMENT_COLUMNS}
        "#
    );
    let inserted = sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(new.id)
        .bind(&new.member_id)
        .bind(new.account_id)
        .bind(new.reservation_id)
        .bind(new.amount)
        .bind(start.state().as_str())
        .bind(start.pending().map(Action::as_str))
        .bind(driver)
        .bind(millis(lease))
        .bind(&scope.member)
        .bind(scope.operation)
        .bind(scope.key.as_str())
        .bind(token)
        .fetch_optional(pool)
        .await;
    match inserted {
        Ok(row) => Ok(row),
        Err(e) if constraint(&e) == Some("payments_reservation_unique") => {
            Err(Error::ReservationAlreadyPaid {
                reservation_id: new.reservation_id,
                payment_id: Uuid::nil(),
            })
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn load(pool: &PgPool, id: Uuid) -> Result<Option<PaymentRow>> {
    let sql = format!(r#"SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = $1"#);
    Ok(sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(id)
        .fetch_optional(pool)
        .await?)
}

pub async fn by_reservation(pool: &PgPool, reservation_id: Uuid) -> Result<Option<PaymentRow>> {
    let sql = format!(r#"SELECT {PAYMENT_COLUMNS} FROM payments WHERE reservation_id = $1"#);
    Ok(sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(reservation_id)
        .fetch_optional(pool)
        .await?)
}
