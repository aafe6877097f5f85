//! Members: sign-up, lookups, and opening each member's account in the account service
//! (on sign-up, on its retry, on sign-in, and by the repair job), always under the same
//! opening key, so however often it is attempted the member has one account.

use std::{net::IpAddr, time::Duration};

use chrono::{DateTime, Utc};
use futures::{stream, StreamExt};
use paysaga_common::auth::MemberId;
use paysaga_contracts::{
    account::api::OpenAccountRequest,
    member::api::{account_open_key, Credentials, Member},
};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    email::Email,
    error::{Error, Result},
    password,
    throttle::{self, Subjects},
    verification, AppState,
};

/// A member as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct MemberRow {
    pub id: Uuid,
    pub email: String,
    pub password_hash: String,
    pub account_id: Option<i64>,
    pub opening_balance: i64,
    pub created_at: DateTime<Utc>,
    pub email_verified: bool,
}

impl From<MemberRow> for Member {
    fn from(r: MemberRow) -> Self {
        Member {
            id: r.id,
            email: r.email,
            account_id: r.account_id,
            created_at: r.created_at,
            email_verified: r.email_verified,
        }
    }
}

/// A [`MemberRow`]'s columns, for every statement that reads one.
pub(crate) const COLUMNS: &str = "id, email, password_hash, account_id, opening_balance, \
     created_at, email_verified_at IS NOT NULL AS email_verified";

pub(crate) async fn by_email(pool: &PgPool, email: &Email) -> Result<Option<MemberRow>> {
    Ok(
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM members WHERE email = $1"))
            .bind(email.as_str())
            .fetch_optional(pool)
            .await?,
    )
}

/// The member `id`; `MEMBER_NOT_FOUND` when there is none.
pub(crate) async fn by_id(pool: &PgPool, id: Uuid) -> Result<MemberRow> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM members WHERE id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?
        .ok_or(Error::MemberNotFound)
}

/// Members with ids after `after`, in id order.
pub(crate) async fn page(pool: &PgPool, limit: u32, after: Option<Uuid>) -> Result<Vec<Member>> {
    let rows: Vec<MemberRow> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM members WHERE id > $1 ORDER BY id LIMIT $2"
    ))
    .bind(after.unwrap_or(Uuid::nil()))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Member::from).collect())
}

/// Inserts a member unless the email is taken (then `None`), with its
/// `member.verification_requested` event in the same transaction.
async fn insert(state: &AppState, email: &Email, phc: &str) -> Result<Option<MemberRow>> {
    let mut tx = state.pool.begin().await?;
    let row: Option<MemberRow> = sqlx::query_as(&format!(
        r#"INSERT INTO members (id, email, password_hash)
           VALUES ($1, $2, $3)
           ON CONFLICT ON CONSTRAINT members_email_unique DO NOTHING
           RETURNING {COLUMNS}"#
    ))
    .bind(Uuid::now_v7())
    .bind(email.as_str())
    .bind(phc)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(row) = &row {
        verification::request(&mut tx, state, row).await?;
    }
    tx.commit().await?;
    Ok(row)
}

/// `POST /v1/members`. The body's rules are checked first (no query), then the sign-up
/// limits take their count before anything is looked up or hashed. The member row is
/// committed first (with its `member.verification_requested` event), then the account opened, then its id stored; if the account service
/// fails in between, the member exists with no account (`ACCOUNT_PENDING`) until a
/// retry of this sign-up, a sign-in or the repair job completes it.
pub(crate) async fn sign_up(
    state: &AppState,
    creds: Credentials,
    address: Option<IpAddr>,
) -> Result<Member> {
    let email = Email::parse(&creds.email).ok_or(Error::InvalidEmail)?;
    password::check(&creds.password, Some(&email)).map_err(Error::WeakPassword)?;
    throttle::take_sign_up(&state.pool, &state.config.sign_up, address).await?;
    if let Some(existing) = by_email(&state.pool, &email).await? {
        return complete_existing(state, existing, creds.password, address).await;
    }
    let phc = state.passwords.hash(creds.password.clone()).await?;
    match insert(state, &email, &phc).await? {
        Some(row) => {
            tracing::info!(member = %row.id, "member signed up");
            metrics::counter!("member_sign_ups_total").increment(1);
            finish_opening(state, row).await
        }
        // Another sign-up of the same email won the insert meanwhile.
        None => {
            let existing = by_email(&state.pool, &email)
                .await?
                .ok_or(Error::EmailTaken)?;
            complete_existing(state, existing, creds.password, address).await
        }
    }
}

/// The same email again: a member whose account is still to be opened, signing up
/// with the same password, is a retry and gets its account; anything else is taken.
async fn complete_existing(
    state: &AppState,
    row: MemberRow,
    password: String,
    address: Option<IpAddr>,
) -> Result<Member> {
    if row.account_id.is_some() {
        return Err(Error::EmailTaken);
    }
    // The answer tells whether the password was right: counted like a sign-in from this
    // address, so this is no way around sign-in throttling.
    let who = Subjects::new(&row.email, address);
    let limits = &state.config.throttle;
    throttle::check(&state.pool, limits, &who).await?;
    if !state
        .passwords
        .verify(password, Some(row.password_hash.clone()))
        .await?
    {
        throttle::record_failure(&state.pool, limits, &who).await?;
        return Err(Error::EmailTaken);
    }
    tracing::info!(member = %row.id, "sign-up retried; completing its account");
    finish_opening(state, row).await
}

async fn finish_opening(state: &AppState, mut row: MemberRow) -> Result<Member> {
    match ensure_account(state, &row).await {
        Ok(account_id) => {
            row.account_id = Some(account_id);
            Ok(row.into())
        }
        Err(e) => {
            tracing::warn!(member = %row.id, error = %e, "account not opened; the member waits for a retry or the repair job");
            metrics::counter!("member_account_pending_total").increment(1);
            Err(Error::AccountPending)
        }
    }
}

/// Opens the member's account (or finds the one its key already opened) and stores
/// its id: the account id.
pub(crate) async fn ensure_account(state: &AppState, row: &MemberRow) -> Result<i64> {
    if let Some(id) = row.account_id {
        return Ok(id);
    }
    let req = OpenAccountRequest {
        member_id: MemberId::parse(row.id.to_string()).expect("a UUID is always a valid member id"),
        opening_balance: row.opening_balance,
        open_key: Some(account_open_key(row.id)),
    };
    let answer = state
        .accounts
        .open_account(&req)
        .await
        .map_err(Error::account_call)?;
    let account_id = answer.body.id;
    // Only a NULL is filled in: the key opens one account, so a stored id is this one.
    let stored: Option<i64> = sqlx::query_scalar(
        r#"UPDATE members SET account_id = $2 WHERE id = $1 AND account_id IS NULL
           RETURNING account_id"#,
    )
    .bind(row.id)
    .bind(account_id)
    .fetch_optional(&state.pool)
    .await?;
    if stored.is_some() {
        tracing::info!(member = %row.id, account_id, "member account opened");
    }
    Ok(account_id)
}

/// What one repair pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Repaired {
    /// Members whose account id is now stored.
    pub opened: usize,
    /// Members still waiting (the account service failed again).
    pub failed: usize,
}

/// How many members a repair pass reads at a time, and opens at once.
const REPAIR_BATCH: i64 = 200;
const REPAIR_CONCURRENCY: usize = 4;

/// Opens the accounts of members whose account id is still NULL and who are older than
/// `min_age` (younger ones are left to their own sign-up request). Each is asked for
/// under its fixed opening key, so a member whose account was opened but whose id was
/// never stored gets that same account back, never a second one.
pub async fn repair_accounts(state: &AppState, min_age: Duration) -> Result<Repaired> {
    let mut done = Repaired::default();
    let mut after = Uuid::nil();
    loop {
        let rows: Vec<MemberRow> = sqlx::query_as(&format!(
            r#"SELECT {COLUMNS} FROM members
               WHERE account_id IS NULL AND created_at <= now() - make_interval(secs => $1)
                 AND id > $2
               ORDER BY id LIMIT $3"#
        ))
        .bind(min_age.as_secs_f64())
        .bind(after)
        .bind(REPAIR_BATCH)
        .fetch_all(&state.pool)
        .await?;
        let Some(last) = rows.last() else { break };
        after = last.id;
        let batch = rows.len();
        let results: Vec<(Uuid, Result<i64>)> = stream::iter(rows)
            .map(|row| async move { (row.id, ensure_account(state, &row).await) })
            .buffer_unordered(REPAIR_CONCURRENCY)
            .collect()
            .await;
        for (member, result) in results {
            match result {
                Ok(_) => done.opened += 1,
                Err(e) => {
                    done.failed += 1;
                    tracing::warn!(%member, error = %e, "account repair failed; next pass retries");
                }
            }
        }
        if (batch as i64) < REPAIR_BATCH {
            break;
        }
    }
    if done.opened + done.failed > 0 {
        tracing::info!(
            opened = done.opened,
            failed = done.failed,
            "account repair pass"
        );
        metrics::counter!("member_accounts_repaired_total").increment(done.opened as u64);
    }
    Ok(done)
}
