//! Products and their units: creation, adding units, the counts per state, and the
//! terms a reservation of a product is made on (its price and hold time).

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::Duration,
};

use chrono::{DateTime, Utc};
use paysaga_contracts::eligibility::EligibilityRule;
use sqlx::{PgPool, Postgres, Transaction};

use crate::{api::Product, error::Result};

/// Most units one request may create; bigger stock is added in several calls.
pub const MAX_UNITS_PER_CALL: i64 = 100_000;

#[derive(sqlx::FromRow)]
struct ProductRow {
    id: i64,
    name: String,
    price: i64,
    created_at: DateTime<Utc>,
    units_total: i64,
    available: i64,
    reserved: i64,
    offered: i64,
    sold: i64,
    waiting: i64,
    reservation_ttl_secs: Option<i32>,
    #[sqlx(flatten)]
    rules: RuleColumns,
}

/// A product's eligibility rules as stored: one column per rule kind.
#[derive(Debug, Default, sqlx::FromRow)]
struct RuleColumns {
    accounts_created_before: Option<DateTime<Utc>>,
    email_verified_required: bool,
}

impl RuleColumns {
    /// Each rule in its column (one of each kind: `normalize`).
    fn of(rules: &[EligibilityRule]) -> Self {
        let mut columns = Self::default();
        for rule in rules {
            match rule {
                EligibilityRule::AccountCreatedBefore { at } => {
                    columns.accounts_created_before = Some(*at)
                }
                EligibilityRule::EmailVerified => columns.email_verified_required = true,
            }
        }
        columns
    }

    fn rules(&self) -> Vec<EligibilityRule> {
        let at = self
            .accounts_created_before
            .map(|at| EligibilityRule::AccountCreatedBefore { at });
        let email = self
            .email_verified_required
            .then_some(EligibilityRule::EmailVerified);
        at.into_iter().chain(email).collect()
    }
}

impl From<ProductRow> for Product {
    fn from(r: ProductRow) -> Self {
        Product {
            id: r.id,
            name: r.name,
            price: r.price,
            units_total: r.units_total,
            available: r.available,
            reserved: r.reserved,
            offered: r.offered,
            sold: r.sold,
            waiting: r.waiting,
            reservation_ttl_secs: r.reservation_ttl_secs.and_then(|t| u32::try_from(t).ok()),
            eligibility: r.rules.rules(),
            created_at: r.created_at,
        }
    }
}

async fn insert_units(
    tx: &mut Transaction<'_, Postgres>,
    product_id: i64,
    count: i64,
) -> Result<()> {
    sqlx::query(
        r#"
        INSERT INTO product_stock (product_id)
        SELECT $1 FROM generate_series(1, $2)
        "#,
    )
    .bind(product_id)
    .bind(count)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A new product's terms.
pub struct NewProduct<'a> {
    pub name: &'a str,
    pub price: i64,
    pub units: i64,
    /// Its own reservation hold time, seconds (`None`: the service's).
    pub reservation_ttl_secs: Option<u32>,
    /// Who may take part (one of each kind: [`paysaga_contracts::eligibility::normalize`]).
    pub eligibility: &'a [EligibilityRule],
}

/// Creates a product and its units in one transaction: it exists with all its stock or not at all.
#[tracing::instrument(skip_all, fields(units = new.units))]
pub async fn create_product(pool: &PgPool, new: &NewProduct<'_>) -> Result<Product> {
    let (name, price, units) = (new.name, new.price, new.units);
    let rules = RuleColumns::of(new.eligibility);
    let mut tx = pool.begin().await?;
    let id: i64 = sqlx::query_scalar(
        r#"
        INSERT INTO products (name, price, reservation_ttl_secs, accounts_created_before,
                              email_verified_required)
        VALUES ($1, $2, $3, $4, $5)
        RETURNING id
        "#,
    )
    .bind(name)
    .bind(price)
    .bind(new.reservation_ttl_secs.and_then(|t| i32::try_from(t).ok()))
    .bind(rules.accounts_created_before)
    .bind(rules.email_verified_required)
    .fetch_one(&mut *tx)
    .await?;
    insert_units(&mut tx, id, units).await?;
    tx.commit().await?;
    product(pool, id).await?.ok_or_else(|| {
        crate::error::Error::Invariant(crate::breach::Breach::missing("created product", id))
    })
}

/// A product's eligibility rules; `None` for an unknown product.
pub async fn eligibility(pool: &PgPool, product_id: i64) -> Result<Option<Vec<EligibilityRule>>> {
    let row: Option<RuleColumns> = sqlx::query_as(
        r#"SELECT accounts_created_before, email_verified_required FROM products WHERE id = $1"#,
    )
    .bind(product_id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| r.rules()))
}

/// Adds `count` AVAILABLE units; `None` when the product does not exist.
#[tracing::instrument(skip_all, fields(product_id, count))]
pub async fn add_units(pool: &PgPool, product_id: i64, count: i64) -> Result<Option<Product>> {
    let mut tx = pool.begin().await?;
    let exists: Option<i64> = sqlx::query_scalar(
        r#"
        SELECT id FROM products WHERE id = $1
        "#,
    )
    .bind(product_id)
    .fetch_optional(&mut *tx)
    .await?;
    if exists.is_none() {
        return Ok(None);
    }
    insert_units(&mut tx, product_id, count).await?;
    tx.commit().await?;
    product(pool, product_id).await
}

/// Products with their counts (the columns of [`ProductRow`]), then `$tail`: one and the
/// same count for the product view and the listing.
macro_rules! with_counts {
    ($tail:literal) => {
        concat!(
            r#"
        SELECT p.id, p.name, p.price, p.created_at, p.reservation_ttl_secs,
               p.accounts_created_before, p.email_verified_required,
               COUNT(s.id) AS units_total,
               COUNT(s.id) FILTER (WHERE s.state = 'AVAILABLE') AS available,
               COUNT(s.id) FILTER (WHERE s.state = 'RESERVED') AS reserved,
               COUNT(s.id) FILTER (WHERE s.state = 'OFFERED') AS offered,
               COUNT(s.id) FILTER (WHERE s.state = 'SOLD') AS sold,
               (SELECT COUNT(*) FROM waitlist_entries w
                WHERE w.product_id = p.id AND w.state = 'WAITING') AS waiting
        FROM products p
        LEFT JOIN product_stock s ON s.product_id = p.id
        "#,
            $tail
        )
    };
}

/// One product with its counts.
pub async fn product(pool: &PgPool, product_id: i64) -> Result<Option<Product>> {
    let row = sqlx::query_as::<_, ProductRow>(with_counts!(
        "WHERE p.id = $1
        GROUP BY p.id"
    ))
    .bind(product_id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Product::from))
}

/// Every product with its counts, oldest first.
pub async fn list_products(pool: &PgPool) -> Result<Vec<Product>> {
    let rows = sqlx::query_as::<_, ProductRow>(with_counts!(
        "GROUP BY p.id
        ORDER BY p.id"
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Product::from).collect())
}

/// A query over one product's AVAILABLE units, `$aggregate` opening the subquery.
macro_rules! of_available {
    ($aggregate:literal) => {
        concat!(
            "SELECT ",
            $aggregate,
            " FROM product_stock s WHERE s.product_id = p.id AND s.state = 'AVAILABLE')
        FROM products p
        WHERE p.id = $1"
        )
    };
}

/// Units AVAILABLE now (read from the partial index alone); `None` for an unknown product.
pub async fn availability(pool: &PgPool, product_id: i64) -> Result<Option<i64>> {
    of_product(pool, product_id, of_available!("(SELECT COUNT(*)")).await
}

/// What a claim that found nothing needs to know: does the product exist, and is any
/// unit AVAILABLE (locked by an in-flight transaction that may yet give it back)?
pub async fn probe(pool: &PgPool, product_id: i64) -> Result<Option<bool>> {
    of_product(pool, product_id, of_available!("EXISTS (SELECT 1")).await
}

/// Runs `sql` (a scalar per product, `$1` its id); `None` for an unknown product.
async fn of_product<T>(pool: &PgPool, product_id: i64, sql: &'static str) -> Result<Option<T>>
where
    T: Send + Unpin,
    (T,): for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
{
    Ok(sqlx::query_scalar(sql)
        .bind(product_id)
        .fetch_optional(pool)
        .await?)
}

/// What a reservation of a product is made on: the price held and paid, and how long
/// the unit and the price are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terms {
    pub price: i64,
    /// The product's own hold time, if it set one.
    pub reservation_ttl: Option<Duration>,
}

impl Terms {
    /// The hold time, the service's `default` unless the product set its own.
    pub fn ttl(&self, default: Duration) -> Duration {
        self.reservation_ttl.unwrap_or(default)
    }
}

/// Each product's [`Terms`], read once per process: a product's price and hold time are
/// fixed when it is created (no route changes them), so the reservation path reads them
/// from memory. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct TermsCache(Arc<RwLock<HashMap<i64, Terms>>>);

impl TermsCache {
    /// The terms of `product_id`; `None` for an unknown product.
    pub async fn get(&self, pool: &PgPool, product_id: i64) -> Result<Option<Terms>> {
        if let Some(t) = self
            .0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&product_id)
        {
            return Ok(Some(*t));
        }
        let row: Option<(i64, Option<i32>)> =
            sqlx::query_as(r#"SELECT price, reservation_ttl_secs FROM products WHERE id = $1"#)
                .bind(product_id)
                .fetch_optional(pool)
                .await?;
        let Some((price, ttl)) = row else {
            return Ok(None);
        };
        let terms = Terms {
            price,
            reservation_ttl: ttl
                .and_then(|t| u64::try_from(t).ok())
                .map(Duration::from_secs),
        };
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(product_id, terms);
        Ok(Some(terms))
    }
}
