//! Creating a payment together with its idempotency record, and loading one.

use std::{sync::LazyLock, time::Duration};

use paysaga_common::db::column;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;
use workflows::{Action, Position};

use super::row::{millis, returned_columns, Indexed, PaymentRow, PAYMENT_COLUMNS};
use crate::{
    error::{Error, Result},
    idempotency::{Scope, LINK_KEYS, OWNED_KEYS},
};

/// A new payment's facts, checked with the downstreams before it is stored.
#[derive(Debug, Clone)]
pub struct NewPayment {
    pub id: Uuid,
    pub member_id: String,
    pub account_id: i64,
    pub reservation_id: Uuid,
    pub amount: i64,
    /// The reservation's product, for the payment's events.
    pub product_id: Option<i64>,
    /// The creating request's trace context, kept with the payment.
    pub traceparent: Option<String>,
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
    let one = Linked {
        new: new.clone(),
        driver,
        lease,
        scope: scope.clone(),
        token,
    };
    let mut conn = pool.acquire().await?;
    let inserted = insert_many(&mut conn, std::slice::from_ref(&one))
        .await?
        .pop()
        .flatten();
    drop(conn);
    explain_missing(pool, &one, inserted).await
}

/// A payment to create and the idempotency record it answers, for [`insert_many`].
#[derive(Debug, Clone)]
pub struct Linked {
    pub new: NewPayment,
    pub driver: Uuid,
    pub lease: Duration,
    pub scope: Scope,
    pub token: Uuid,
}

/// After [`insert_many`] wrote nothing for `one`: the reservation already has a payment
/// (`ReservationAlreadyPaid`), or `token` lost the key (`None`).
pub async fn explain_missing(
    pool: &PgPool,
    one: &Linked,
    inserted: Option<PaymentRow>,
) -> Result<Option<PaymentRow>> {
    if inserted.is_some() {
        return Ok(inserted);
    }
    match by_reservation(pool, one.new.reservation_id).await? {
        Some(other) if other.id != one.new.id => Err(Error::ReservationAlreadyPaid {
            reservation_id: one.new.reservation_id,
            payment_id: other.id,
        }),
        _ => Ok(None),
    }
}

/// [`insert_linked_payment`] for many requests in one statement (group commit). The
/// `member_id = ANY` beside each join keeps the key lookups on the primary key's index
/// (a hash join over the whole table would grow with every request ever made). Only
/// requests whose token still owns an unlinked key are inserted, and a reservation
/// that already has a payment is skipped, not an error, so one such request cannot
/// fail the others; `None` for each request not inserted (see [`explain_missing`]).
pub async fn insert_many(
    conn: &mut PgConnection,
    payments: &[Linked],
) -> Result<Vec<Option<PaymentRow>>> {
    let start = Position::start();
    let idx = (0..payments.len())
        .map(|i| super::steps::batch_index(i, payments.len()))
        .collect::<Result<Vec<_>>>()?;
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            r#"
        WITH req AS (
            SELECT *
            FROM UNNEST($1::INTEGER[], $2::UUID[], $3::TEXT[], $4::BIGINT[], $5::UUID[], $6::BIGINT[],
                        $7::UUID[], $8::BIGINT[], $9::TEXT[], $10::TEXT[], $11::UUID[], $14::BIGINT[], $15::TEXT[])
                AS r(idx, id, member_id, account_id, reservation_id, amount, driver, lease_ms,
                     operation, idem_key, token, product_id, traceparent)
        ), {OWNED_KEYS}, inserted AS (
            INSERT INTO payments (id, member_id, account_id, reservation_id, amount, state, pending_action,
                                  next_attempt_at, lease_owner, lease_until, product_id, traceparent)
            SELECT id, member_id, account_id, reservation_id, amount, $12, $13, now(), driver,
                   now() + lease_ms * INTERVAL '1 millisecond', product_id, traceparent
            FROM owned
            ON CONFLICT ON CONSTRAINT payments_reservation_unique DO NOTHING
            RETURNING {PAYMENT_COLUMNS}
        ), {LINK_KEYS}
        SELECT req.idx AS batch_idx, {RETURNED}
        FROM inserted i
        JOIN req ON req.id = i.id
        "#,
            RETURNED = returned_columns("i"),
        )
    });
    let rows = sqlx::query_as::<_, Indexed>(&SQL)
        .bind(idx)
        .bind(column(payments, |p| p.new.id))
        .bind(column(payments, |p| p.new.member_id.clone()))
        .bind(column(payments, |p| p.new.account_id))
        .bind(column(payments, |p| p.new.reservation_id))
        .bind(column(payments, |p| p.new.amount))
        .bind(column(payments, |p| p.driver))
        .bind(column(payments, |p| millis(p.lease)))
        .bind(column(payments, |p| p.scope.operation))
        .bind(column(payments, |p| p.scope.key.as_str()))
        .bind(column(payments, |p| p.token))
        .bind(start.state().as_str())
        .bind(start.pending().map(Action::as_str))
        .bind(column(payments, |p| p.new.product_id))
        .bind(column(payments, |p| p.new.traceparent.as_deref()))
        .fetch_all(&mut *conn)
        .await?;
    Indexed::place(rows, payments.len())
}

pub async fn load(pool: &PgPool, id: Uuid) -> Result<Option<PaymentRow>> {
    payment_where(pool, "id", id).await
}

pub async fn by_reservation(pool: &PgPool, reservation_id: Uuid) -> Result<Option<PaymentRow>> {
    payment_where(pool, "reservation_id", reservation_id).await
}

/// The payment whose `column` (a unique one of this module's choosing, never input)
/// is `value`.
async fn payment_where(
    pool: &PgPool,
    column: &'static str,
    value: Uuid,
) -> Result<Option<PaymentRow>> {
    let sql = format!(r#"SELECT {PAYMENT_COLUMNS} FROM payments WHERE {column} = $1"#);
    Ok(sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(value)
        .fetch_optional(pool)
        .await?)
}
