//! Reservations as stored, read by id, by pass or by offer (the claim is `claim`, the
//! transitions are `settle`).

use chrono::{DateTime, Utc};
use paysaga_common::auth::MemberId;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::{
    api::{Reservation, ReservationState},
    error::Result,
    states::Text,
};

/// A `reservations` row as every statement of the service selects it, its state and
/// member decoded as they are read.
#[derive(sqlx::FromRow)]
pub(crate) struct ReservationRow {
    id: Uuid,
    product_id: i64,
    #[sqlx(try_from = "String")]
    member_id: MemberId,
    unit_id: i64,
    price: i64,
    state: Text<ReservationState>,
    expires_at: DateTime<Utc>,
    order_id: Option<Uuid>,
    account_id: Option<i64>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<ReservationRow> for Reservation {
    fn from(r: ReservationRow) -> Self {
        Reservation {
            id: r.id,
            product_id: r.product_id,
            member_id: r.member_id,
            unit_id: r.unit_id,
            price: r.price,
            state: r.state.0,
            expires_at: r.expires_at,
            order_id: r.order_id,
            account_id: r.account_id,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// The `reservations` columns of [`ReservationRow`], then `$filter`.
macro_rules! select {
    ($filter:literal) => {
        concat!(
            "SELECT id, product_id, member_id, unit_id, price, state, expires_at, order_id, ",
            "account_id, created_at, updated_at FROM reservations ",
            $filter
        )
    };
}

/// The one reservation `sql` selects by `key`, if any.
async fn one<'c>(
    executor: impl sqlx::PgExecutor<'c>,
    sql: &'static str,
    key: Uuid,
) -> Result<Option<Reservation>> {
    let row = sqlx::query_as::<_, ReservationRow>(sql)
        .bind(key)
        .fetch_optional(executor)
        .await?;
    Ok(row.map(Reservation::from))
}

/// The reservation made by taking an offer, if any.
pub(crate) async fn by_offer(
    tx: &mut Transaction<'_, Postgres>,
    offer_id: Uuid,
) -> Result<Option<Reservation>> {
    one(&mut **tx, select!("WHERE offer_id = $1"), offer_id).await
}

/// The reservation made by taking an offer, if any, outside a transaction.
pub(crate) async fn of_offer(pool: &PgPool, offer_id: Uuid) -> Result<Option<Reservation>> {
    one(pool, select!("WHERE offer_id = $1"), offer_id).await
}

/// The reservation made with a pass, if any.
pub async fn by_pass(pool: &PgPool, pass_id: Uuid) -> Result<Option<Reservation>> {
    one(pool, select!("WHERE pass_id = $1"), pass_id).await
}

pub async fn get(pool: &PgPool, id: Uuid) -> Result<Option<Reservation>> {
    one(pool, select!("WHERE id = $1"), id).await
}

/// The reservations of `ids` that exist, in no particular order.
pub(crate) async fn by_ids(pool: &PgPool, ids: &[Uuid]) -> Result<Vec<Reservation>> {
    let rows = sqlx::query_as::<_, ReservationRow>(select!("WHERE id = ANY($1)"))
        .bind(ids)
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(Reservation::from).collect())
}

/// Records that `pass_id`'s holder could not pay for the unit it stood for (see
/// [`spent_passes`]).
pub async fn refuse_unfunded(
    pool: &PgPool,
    pass_id: Uuid,
    product_id: i64,
    member: &MemberId,
) -> Result<()> {
    sqlx::query(
        r#"
        INSERT INTO unfunded_passes (pass_id, product_id, member_id)
        VALUES ($1, $2, $3)
        ON CONFLICT (pass_id) DO NOTHING
        "#,
    )
    .bind(pass_id)
    .bind(product_id)
    .bind(member.as_str())
    .execute(pool)
    .await?;
    Ok(())
}

/// Which of `pass_ids` the gate need not count in flight any more: those on a
/// reservation, and those whose holder could not pay (`POST /v1/passes/used`).
pub async fn spent_passes(pool: &PgPool, pass_ids: &[Uuid]) -> Result<Vec<Uuid>> {
    let spent = sqlx::query_scalar(
        r#"
        SELECT pass_id FROM reservations WHERE pass_id = ANY($1)
        UNION
        SELECT pass_id FROM unfunded_passes WHERE pass_id = ANY($1)
        "#,
    )
    .bind(pass_ids)
    .fetch_all(pool)
    .await?;
    Ok(spent)
}

/// Which of `pass_ids` are on a reservation (through `reservations_pass_id_unique`).
pub async fn used_passes(pool: &PgPool, pass_ids: &[Uuid]) -> Result<Vec<Uuid>> {
    let used = sqlx::query_scalar(
        r#"
        SELECT pass_id
        FROM reservations
        WHERE pass_id = ANY($1)
        "#,
    )
    .bind(pass_ids)
    .fetch_all(pool)
    .await?;
    Ok(used)
}
