//! `POST /v1/members/bulk`: many members at once for seeding demos and benchmarks.
//!
//! The password is hashed once and that one PHC string is stored for every member of
//! the request. Acceptable only for seeding: members sharing a hash share a salt, so
//! one cracked hash opens them all and equal hashes reveal equal passwords; such
//! members must never be real buyers. The endpoint is off unless the service runs
//! with `MEMBER_BULK_SIGNUP=1`, and needs a service credential.

use std::collections::{HashMap, HashSet};

use futures::{stream, StreamExt, TryStreamExt};
use paysaga_common::money::MAX_AMOUNT;
use paysaga_contracts::member::api::{
    BulkSignUpRequest, BulkSignUpResponse, BulkSignedUp, Member, MAX_BULK_MEMBERS,
};
use uuid::Uuid;

use crate::{
    email::Email,
    error::{Error, Result},
    members::{self, MemberRow, COLUMNS},
    password, sessions, AppState,
};

/// Accounts opened at once.
const OPEN_CONCURRENCY: usize = 8;

async fn rows_by_email(state: &AppState, emails: &[String]) -> Result<Vec<MemberRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM members WHERE email = ANY($1)"
    ))
    .bind(emails)
    .fetch_all(&state.pool)
    .await?)
}

/// Signs the members up (or finds them, if they signed up before with this same
/// password), opens their accounts, and signs each in.
pub(crate) async fn sign_up(
    state: &AppState,
    req: BulkSignUpRequest,
) -> Result<BulkSignUpResponse> {
    if !state.config.bulk_signup {
        return Err(Error::BulkDisabled);
    }
    let got = req.members.len();
    if got == 0 || got > MAX_BULK_MEMBERS {
        return Err(Error::BulkTooLarge {
            max: MAX_BULK_MEMBERS,
            got,
        });
    }
    let opening = req.opening_balance.unwrap_or(0);
    if !(0..=MAX_AMOUNT).contains(&opening) {
        return Err(Error::InvalidOpeningBalance { max: MAX_AMOUNT });
    }
    let emails: Vec<Email> = req
        .members
        .iter()
        .enumerate()
        .map(|(index, m)| Email::parse(&m.email).ok_or(Error::InvalidBulkEmail { index }))
        .collect::<Result<_>>()?;
    password::check(&req.password, None).map_err(Error::WeakPassword)?;
    let mut distinct: Vec<String> = emails.iter().map(|e| e.as_str().to_owned()).collect();
    distinct.sort_unstable();
    distinct.dedup();

    // Members that exist already are answered only if this password is theirs: once
    // per distinct stored hash (earlier bulk sign-ups share one).
    let existing = rows_by_email(state, &distinct).await?;
    let mut verified = HashSet::new();
    let hashes: HashSet<String> = existing.iter().map(|r| r.password_hash.clone()).collect();
    let checks: Vec<(String, bool)> = stream::iter(hashes)
        .map(|phc| {
            let password = req.password.clone();
            async move {
                let ok = state.passwords.verify(password, Some(phc.clone())).await?;
                Ok::<_, Error>((phc, ok))
            }
        })
        .buffer_unordered(OPEN_CONCURRENCY)
        .try_collect()
        .await?;
    for (phc, ok) in checks {
        if !ok {
            return Err(Error::EmailTaken);
        }
        verified.insert(phc);
    }

    let phc = state.passwords.hash(req.password.clone()).await?;
    let known: HashSet<&str> = existing.iter().map(|r| r.email.as_str()).collect();
    let new: Vec<&String> = distinct
        .iter()
        .filter(|e| !known.contains(e.as_str()))
        .collect();
    let ids: Vec<Uuid> = new.iter().map(|_| Uuid::now_v7()).collect();
    let inserted = sqlx::query(
        r#"INSERT INTO members (id, email, password_hash, opening_balance)
           SELECT id, email, $3, $4 FROM UNNEST($1::uuid[], $2::text[]) AS t(id, email)
           ON CONFLICT ON CONSTRAINT members_email_unique DO NOTHING"#,
    )
    .bind(&ids)
    .bind(&new)
    .bind(&phc)
    .bind(opening)
    .execute(&state.pool)
    .await?
    .rows_affected();
    verified.insert(phc);

    let rows = rows_by_email(state, &distinct).await?;
    // A member a concurrent sign-up created meanwhile, with some other password.
    if rows.iter().any(|r| !verified.contains(&r.password_hash)) {
        return Err(Error::EmailTaken);
    }
    let opened: Vec<MemberRow> = stream::iter(rows)
        .map(|mut row| async move {
            if row.account_id.is_none() {
                match members::ensure_account(state, &row).await {
                    Ok(id) => row.account_id = Some(id),
                    Err(e) => {
                        tracing::warn!(member = %row.id, error = %e, "bulk: account not opened; the repair job retries")
                    }
                }
            }
            row
        })
        .buffer_unordered(OPEN_CONCURRENCY)
        .collect()
        .await;
    let by_email: HashMap<String, Member> = opened
        .into_iter()
        .map(|r| (r.email.clone(), Member::from(r)))
        .collect();
    let ordered: Vec<Member> = emails
        .iter()
        .map(|e| {
            by_email
                .get(e.as_str())
                .cloned()
                .ok_or(Error::Internal("bulk member vanished".into()))
        })
        .collect::<Result<_>>()?;
    let members: Vec<(Uuid, bool)> = ordered.iter().map(|m| (m.id, m.email_verified)).collect();
    let sessions = sessions::issue_many(state, &members).await?;
    tracing::info!(requested = got, inserted, "bulk sign-up");
    Ok(BulkSignUpResponse {
        members: ordered
            .into_iter()
            .zip(sessions)
            .map(|(member, session)| BulkSignedUp { member, session })
            .collect(),
    })
}
