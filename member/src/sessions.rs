//! Sessions: an access token (a buyer JWT) and a rotating refresh token. Refresh tokens
//! are stored as SHA-256 hashes in families: each use marks the token used and issues
//! the next of its family in the same transaction, under the row's lock, so of two
//! uses of one token exactly one succeeds; a used token presented again revokes the
//! whole family (it was stolen, or the client is confused: either way, sign in again).

use std::net::IpAddr;

use paysaga_contracts::member::api::{Credentials, Session, TOKEN_TYPE};
use uuid::Uuid;

use crate::{
    email::Email,
    error::{Error, Result},
    members,
    throttle::{self, Subjects},
    tokens::{new_refresh_token, refresh_hash},
    AppState,
};

/// A session whose access token says whether the member's email is verified, as it is
/// now: a member who verifies later gets the claim at the next sign-in or refresh.
fn session(state: &AppState, member: Uuid, email_verified: bool, refresh_token: String) -> Session {
    Session {
        member_id: member,
        access_token: state
            .keys
            .mint(member, email_verified, state.config.access_ttl),
        token_type: TOKEN_TYPE.to_owned(),
        expires_in: state.config.access_ttl.as_secs(),
        refresh_token,
        refresh_expires_in: state.config.refresh_ttl.as_secs(),
    }
}

/// A new session (a new refresh-token family) for each member (with whether its email
/// is verified), in order, with one statement.
pub(crate) async fn issue_many(state: &AppState, members: &[(Uuid, bool)]) -> Result<Vec<Session>> {
    let ids: Vec<Uuid> = members.iter().map(|(id, _)| *id).collect();
    let tokens: Vec<String> = members.iter().map(|_| new_refresh_token()).collect();
    let hashes: Vec<Vec<u8>> = tokens.iter().map(|t| refresh_hash(t)).collect();
    let families: Vec<Uuid> = members.iter().map(|_| Uuid::now_v7()).collect();
    sqlx::query(
        r#"INSERT INTO refresh_tokens (token_hash, family_id, member_id, expires_at)
           SELECT h, f, m, now() + make_interval(secs => $4)
           FROM UNNEST($1::bytea[], $2::uuid[], $3::uuid[]) AS t(h, f, m)"#,
    )
    .bind(&hashes)
    .bind(&families)
    .bind(&ids)
    .bind(state.config.refresh_ttl.as_secs_f64())
    .execute(&state.pool)
    .await?;
    Ok(members
        .iter()
        .zip(tokens)
        .map(|((m, verified), t)| session(state, *m, *verified, t))
        .collect())
}

/// A new session for one member.
pub(crate) async fn issue(state: &AppState, member: Uuid, email_verified: bool) -> Result<Session> {
    let mut sessions = issue_many(state, &[(member, email_verified)]).await?;
    sessions
        .pop()
        .ok_or_else(|| Error::Internal("no session issued".into()))
}

#[derive(sqlx::FromRow)]
struct TokenRow {
    family_id: Uuid,
    member_id: Uuid,
    used: bool,
    revoked: bool,
    expired: bool,
    email_verified: bool,
}

/// `POST /v1/sessions/refresh`: spends `token` and issues the next of its family.
pub(crate) async fn refresh(state: &AppState, token: &str) -> Result<Session> {
    let hash = refresh_hash(token);
    let mut tx = state.pool.begin().await?;
    // A second use of the same token waits here for the first to commit, then finds
    // the token used.
    let row: Option<TokenRow> = sqlx::query_as(
        r#"SELECT t.family_id, t.member_id,
                  t.used_at IS NOT NULL AS used,
                  t.revoked_at IS NOT NULL AS revoked,
                  t.expires_at <= now() AS expired,
                  m.email_verified_at IS NOT NULL AS email_verified
           FROM refresh_tokens t JOIN members m ON m.id = t.member_id
           WHERE t.token_hash = $1
           FOR UPDATE OF t"#,
    )
    .bind(&hash)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Err(Error::InvalidRefreshToken);
    };
    if row.used {
        let revoked = sqlx::query(
            r#"UPDATE refresh_tokens SET revoked_at = now()
               WHERE family_id = $1 AND revoked_at IS NULL"#,
        )
        .bind(row.family_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        tracing::warn!(member = %row.member_id, family = %row.family_id, revoked, "refresh token reused; family revoked");
        metrics::counter!("member_refresh_reuse_total").increment(1);
        return Err(Error::RefreshTokenReused);
    }
    if row.revoked || row.expired {
        return Err(Error::InvalidRefreshToken);
    }
    sqlx::query("UPDATE refresh_tokens SET used_at = now() WHERE token_hash = $1")
        .bind(&hash)
        .execute(&mut *tx)
        .await?;
    let next = new_refresh_token();
    sqlx::query(
        r#"INSERT INTO refresh_tokens (token_hash, family_id, member_id, expires_at)
           VALUES ($1, $2, $3, now() + make_interval(secs => $4))"#,
    )
    .bind(refresh_hash(&next))
    .bind(row.family_id)
    .bind(row.member_id)
    .bind(state.config.refresh_ttl.as_secs_f64())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(session(state, row.member_id, row.email_verified, next))
}

/// `POST /v1/sessions/sign-out`: revokes the family of `token`, if it is one.
pub(crate) async fn sign_out(state: &AppState, token: &str) -> Result<()> {
    let revoked = sqlx::query(
        r#"UPDATE refresh_tokens SET revoked_at = now()
           WHERE family_id = (SELECT family_id FROM refresh_tokens WHERE token_hash = $1)
             AND revoked_at IS NULL"#,
    )
    .bind(refresh_hash(token))
    .execute(&state.pool)
    .await?
    .rows_affected();
    tracing::debug!(revoked, "sign-out");
    Ok(())
}

/// Deletes refresh tokens that expired more than a day ago: past use, and past the
/// time a reuse of them would still be worth noticing.
pub(crate) async fn purge_expired(state: &AppState) -> Result<u64> {
    Ok(
        sqlx::query(r#"DELETE FROM refresh_tokens WHERE expires_at < now() - interval '1 day'"#)
            .execute(&state.pool)
            .await?
            .rows_affected(),
    )
}

/// `POST /v1/sessions`: throttling first (no hashing for a refused attempt), then the
/// password, checked against the member's hash or, for an unknown email, against the
/// dummy hash, so both failures cost the same and answer the same.
pub(crate) async fn sign_in(
    state: &AppState,
    creds: Credentials,
    address: Option<IpAddr>,
) -> Result<Session> {
    // A malformed address can belong to no member: counted and answered like any
    // unknown email.
    let normalised = creds.email.trim().to_lowercase();
    let email = Email::parse(&normalised);
    let who = Subjects::new(&normalised, address);
    let limits = &state.config.throttle;
    throttle::check(&state.pool, limits, &who).await?;
    let member = match &email {
        Some(email) => members::by_email(&state.pool, email).await?,
        None => None,
    };
    let matched = state
        .passwords
        .verify(
            creds.password,
            member.as_ref().map(|m| m.password_hash.clone()),
        )
        .await?;
    let Some(member) = member.filter(|_| matched) else {
        throttle::record_failure(&state.pool, limits, &who).await?;
        metrics::counter!("member_sign_ins_total", "outcome" => "invalid").increment(1);
        return Err(Error::InvalidCredentials);
    };
    throttle::clear_pair(&state.pool, &who).await?;
    if member.account_id.is_none() {
        // The sign-up's account opening failed earlier: try again now, but a session
        // does not depend on it (the repair job keeps trying).
        if let Err(e) = members::ensure_account(state, &member).await {
            tracing::warn!(member = %member.id, error = %e, "account still not opened at sign-in");
        }
    }
    metrics::counter!("member_sign_ins_total", "outcome" => "ok").increment(1);
    issue(state, member.id, member.email_verified).await
}
