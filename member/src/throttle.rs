//! Throttling failed sign-ins per normalised email and per client address, counted in
//! PostgreSQL so every instance of the service sees the same numbers. A subject that
//! reached its limit within the window is refused until the window has passed. The
//! check runs before any password hashing, so a refused attempt costs a query.

use std::net::IpAddr;

use sha2::{Digest, Sha256};
use sqlx::PgPool;

use crate::{
    config::Throttle,
    error::{Error, Result},
};

/// Who an attempt counts against; stored only as hashes.
pub(crate) struct Subjects {
    email: Vec<u8>,
    address: Option<Vec<u8>>,
}

impl Subjects {
    pub fn new(email: &str, address: Option<IpAddr>) -> Self {
        Self {
            email: Sha256::digest(email.as_bytes()).to_vec(),
            address: address.map(|a| Sha256::digest(a.to_string().as_bytes()).to_vec()),
        }
    }
}

/// Refuses with `TOO_MANY_ATTEMPTS` (and the seconds until the window ends) when the
/// email or the address reached its limit within the window.
pub(crate) async fn check(pool: &PgPool, limits: &Throttle, who: &Subjects) -> Result<()> {
    let rows: Vec<(String, i32, f64)> = sqlx::query_as(
        r#"SELECT scope, failures,
                  EXTRACT(EPOCH FROM (window_start + make_interval(secs => $3) - now()))::float8
           FROM sign_in_failures
           WHERE (scope = 'EMAIL' AND subject = $1) OR (scope = 'ADDRESS' AND subject = $2)"#,
    )
    .bind(&who.email)
    .bind(who.address.as_deref().unwrap_or_default())
    .bind(limits.window.as_secs_f64())
    .fetch_all(pool)
    .await?;
    let wait = rows
        .iter()
        .filter(|(scope, failures, remaining)| {
            let limit = if scope == "EMAIL" {
                limits.per_email
            } else {
                limits.per_address
            };
            *remaining > 0.0 && i64::from(*failures) >= i64::from(limit)
        })
        .map(|(_, _, remaining)| remaining.ceil() as u64)
        .max();
    match wait {
        Some(secs) => {
            metrics::counter!("member_sign_in_throttled_total").increment(1);
            Err(Error::TooManyAttempts {
                retry_after_secs: secs.max(1),
            })
        }
        None => Ok(()),
    }
}

/// Counts a failed attempt against the email and the address: a subject whose window
/// has passed starts a new one.
pub(crate) async fn record_failure(pool: &PgPool, limits: &Throttle, who: &Subjects) -> Result<()> {
    sqlx::query(
        r#"INSERT INTO sign_in_failures AS f (scope, subject, failures, window_start)
           SELECT s, subj, 1, now()
           FROM UNNEST($1::text[], $2::bytea[]) AS t(s, subj)
           ON CONFLICT ON CONSTRAINT sign_in_failures_pkey DO UPDATE SET
               failures = CASE WHEN f.window_start + make_interval(secs => $3) <= now()
                               THEN 1 ELSE f.failures + 1 END,
               window_start = CASE WHEN f.window_start + make_interval(secs => $3) <= now()
                                   THEN now() ELSE f.window_start END"#,
    )
    .bind(
        std::iter::once("EMAIL")
            .chain(who.address.as_ref().map(|_| "ADDRESS"))
            .collect::<Vec<_>>(),
    )
    .bind(
        std::iter::once(who.email.clone())
            .chain(who.address.clone())
            .collect::<Vec<_>>(),
    )
    .bind(limits.window.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}

/// A successful sign-in clears the email's count (not the address's: one good
/// password does not excuse the guesses of others behind the same address).
pub(crate) async fn clear_email(pool: &PgPool, who: &Subjects) -> Result<()> {
    sqlx::query("DELETE FROM sign_in_failures WHERE scope = 'EMAIL' AND subject = $1")
        .bind(&who.email)
        .execute(pool)
        .await?;
    Ok(())
}

/// Deletes counts whose window has passed.
pub(crate) async fn purge(pool: &PgPool, limits: &Throttle) -> Result<u64> {
    Ok(sqlx::query(
        "DELETE FROM sign_in_failures WHERE window_start < now() - make_interval(secs => $1)",
    )
    .bind(limits.window.as_secs_f64())
    .execute(pool)
    .await?
    .rows_affected())
}
