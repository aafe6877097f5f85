//! Signing in and out. A sign-in is two steps: the password (a right one opens a
//! SECOND_FACTOR session for five minutes), then a TOTP code or an unused recovery code
//! (a right one replaces it with an ACTIVE session for `STAFF_SESSION_TTL_SECS`). The API
//! takes both in one request. Tokens are random, 256 bits; only their SHA-256 is stored,
//! so sign-out (a DELETE) ends a session at once. Password steps are limited per email
//! and per client address, and a password step buys at most five code guesses; every
//! sign-in, failed sign-in and sign-out is in the audit trail.

use std::{net::IpAddr, time::Duration};

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use chrono::{DateTime, Utc};
use paysaga_contracts::staff::api::{StaffMember, StaffSession};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::{
    accounts::{self, normal_email},
    audit::{self, Entry},
    error::{Error, Result},
    totp, Acting, Actor, AuditAction, AuditOutcome, SignedIn, Staff, StaffRole,
};

/// Every staff session token starts with this, so a bearer token is told apart from a
/// service credential (a JWT) without a lookup.
pub const TOKEN_PREFIX: &str = "pss_";
/// How long the second step may wait after a right password.
pub const SECOND_FACTOR_TTL: Duration = Duration::from_secs(300);
/// Wrong codes a SECOND_FACTOR session takes before it is deleted (the password must
/// be given again).
pub const MAX_CODE_FAILURES: i32 = 5;

/// A fresh token and the hash stored for it.
fn new_token() -> (String, Vec<u8>) {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    let token = format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    let hash = token_hash(&token);
    (token, hash)
}

/// What is stored of a token.
pub fn token_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// Whether `token` has the shape of a staff session token (and so is safe in a cookie).
pub fn looks_like_token(token: &str) -> bool {
    token.len() == TOKEN_PREFIX.len() + 43
        && token.starts_with(TOKEN_PREFIX)
        && token[TOKEN_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A password accepted, the second factor awaited.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The SECOND_FACTOR session's token (the console keeps it in its cookie).
    pub token: String,
    pub email: String,
}

/// A new ACTIVE session.
#[derive(Debug, Clone)]
pub struct Session {
    pub token: String,
    pub expires_at: DateTime<Utc>,
    pub staff: StaffMember,
}

impl From<Session> for StaffSession {
    fn from(s: Session) -> Self {
        StaffSession {
            token: s.token,
            expires_at: s.expires_at,
            staff: s.staff,
        }
    }
}

#[derive(sqlx::FromRow)]
struct SessionRow {
    staff_id: i64,
    email: String,
    role: String,
    totp_secret: Option<Vec<u8>>,
    totp_secret_sealed: Option<Vec<u8>>,
    created_at: DateTime<Utc>,
}

fn failed(action_detail: &str) -> Entry {
    Entry {
        action: AuditAction::SignInFailed,
        target: None,
        reason: None,
        outcome: AuditOutcome::Refused,
        detail: Some(action_detail.to_owned()),
    }
}

impl Staff {
    /// The person's TOTP secret: opened (sealed secrets), or as stored (one written in
    /// plaintext before sealing, until the next start seals it).
    fn totp_secret(&self, row: &SessionRow) -> Result<Vec<u8>> {
        match (&row.totp_secret_sealed, &row.totp_secret) {
            (Some(sealed), _) => self
                .config
                .secret_key
                .open(&row.email, sealed)
                .map_err(|e| Error::Internal(e.to_string())),
            (None, Some(plain)) => Ok(plain.clone()),
            (None, None) => Err(Error::Internal(format!(
                "staff {} has no TOTP secret",
                row.staff_id
            ))),
        }
    }

    /// One attempt counted for the email and for the address; refused past the limit.
    fn count_attempt(&self, email: &str, from: Option<IpAddr>) -> Result<()> {
        self.attempts
            .check_key(&format!("email:{email}"))
            .map_err(Error::TooManyAttempts)?;
        if let Some(addr) = from {
            self.attempts
                .check_key(&format!("addr:{addr}"))
                .map_err(Error::TooManyAttempts)?;
        }
        Ok(())
    }

    /// Step one: the password. A right one opens a SECOND_FACTOR session.
    pub async fn check_password(
        &self,
        email: &str,
        password: String,
        from: Option<IpAddr>,
    ) -> Result<Pending> {
        let email = normal_email(email).unwrap_or_else(|| email.trim().to_lowercase());
        self.count_attempt(&email, from)?;
        let row = accounts::by_email(self, &email).await?;
        let ok = self
            .passwords
            .verify(password, row.as_ref().map(|r| r.password_hash.clone()))
            .await?;
        let row = match row {
            Some(row) if ok => row,
            row => {
                audit::record_as(
                    &self.pool,
                    row.map(|r| r.id),
                    &email,
                    from,
                    failed("password"),
                )
                .await?;
                return Err(Error::SignInFailed);
            }
        };
        let (token, hash) = new_token();
        sqlx::query(
            r#"INSERT INTO staff_sessions (token_hash, staff_id, stage, expires_at)
               VALUES ($1, $2, 'SECOND_FACTOR', now() + make_interval(secs => $3))"#,
        )
        .bind(&hash)
        .bind(row.id)
        .bind(SECOND_FACTOR_TTL.as_secs_f64())
        .execute(&self.pool)
        .await?;
        Ok(Pending {
            token,
            email: row.email,
        })
    }

    /// The email a live SECOND_FACTOR session is for.
    pub async fn pending(&self, token: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar::<_, String>(
            r#"SELECT st.email FROM staff_sessions s JOIN staff st ON st.id = s.staff_id
               WHERE s.token_hash = $1 AND s.stage = 'SECOND_FACTOR' AND s.expires_at > now()"#,
        )
        .bind(token_hash(token))
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Step two: a TOTP code (each step's code works once) or an unused recovery code,
    /// for the SECOND_FACTOR session `pending`. A right one ends that session and opens
    /// an ACTIVE one; a wrong one counts against it.
    pub async fn check_code(
        &self,
        pending: &str,
        code: &str,
        from: Option<IpAddr>,
    ) -> Result<Session> {
        let hash = token_hash(pending);
        let row = sqlx::query_as::<_, SessionRow>(
            r#"SELECT s.staff_id, st.email, st.role, st.totp_secret, st.totp_secret_sealed,
                      st.created_at
               FROM staff_sessions s JOIN staff st ON st.id = s.staff_id
               WHERE s.token_hash = $1 AND s.stage = 'SECOND_FACTOR' AND s.expires_at > now()"#,
        )
        .bind(&hash)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(Error::NoSession)?;
        // Not counted against the attempt limits: a code is asked for only after a
        // password step (which is counted), and one password buys at most
        // MAX_CODE_FAILURES guesses.
        let role = StaffRole::parse(&row.role)
            .ok_or_else(|| Error::Internal(format!("staff role {:?}", row.role)))?;
        let mut tx = self.pool.begin().await?;
        let accepted = if totp::is_totp_code(code) {
            let now = Utc::now().timestamp().max(0) as u64;
            match totp::matching_step(&self.totp_secret(&row)?, code, now) {
                // A step no later than the last one used is a replayed code.
                Some(step) => sqlx::query(
                    r#"UPDATE staff SET totp_last_step = $2 WHERE id = $1 AND totp_last_step < $2"#,
                )
                .bind(row.staff_id)
                .bind(step)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    == 1,
                None => false,
            }
        } else {
            sqlx::query(
                r#"UPDATE staff_recovery_codes SET used_at = now()
                   WHERE staff_id = $1 AND code_hash = $2 AND used_at IS NULL"#,
            )
            .bind(row.staff_id)
            .bind(totp::recovery_hash(code))
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1
        };
        if !accepted {
            drop(tx);
            let failures = sqlx::query_scalar::<_, i32>(
                r#"UPDATE staff_sessions SET failures = failures + 1
                   WHERE token_hash = $1 RETURNING failures"#,
            )
            .bind(&hash)
            .fetch_optional(&self.pool)
            .await?;
            if failures.is_some_and(|f| f >= MAX_CODE_FAILURES) {
                sqlx::query(r#"DELETE FROM staff_sessions WHERE token_hash = $1"#)
                    .bind(&hash)
                    .execute(&self.pool)
                    .await?;
            }
            audit::record_as(
                &self.pool,
                Some(row.staff_id),
                &row.email,
                from,
                failed("second factor"),
            )
            .await?;
            return Err(Error::SignInFailed);
        }
        let detail = if totp::is_totp_code(code) {
            "totp"
        } else {
            "recovery code"
        };
        sqlx::query(r#"DELETE FROM staff_sessions WHERE token_hash = $1 OR (staff_id = $2 AND expires_at <= now())"#)
            .bind(&hash)
            .bind(row.staff_id)
            .execute(&mut *tx)
            .await?;
        let (token, active) = new_token();
        let expires_at = sqlx::query_scalar::<_, DateTime<Utc>>(
            r#"INSERT INTO staff_sessions (token_hash, staff_id, stage, expires_at)
               VALUES ($1, $2, 'ACTIVE', now() + make_interval(secs => $3))
               RETURNING expires_at"#,
        )
        .bind(&active)
        .bind(row.staff_id)
        .bind(self.config.session_ttl.as_secs_f64())
        .fetch_one(&mut *tx)
        .await?;
        audit::record_as(
            &mut *tx,
            Some(row.staff_id),
            &row.email,
            from,
            Entry {
                action: AuditAction::SignIn,
                target: None,
                reason: None,
                outcome: AuditOutcome::Done,
                detail: Some(detail.to_owned()),
            },
        )
        .await?;
        tx.commit().await?;
        tracing::info!(staff_id = row.staff_id, "staff sign-in");
        Ok(Session {
            token,
            expires_at,
            staff: StaffMember {
                id: row.staff_id,
                email: row.email,
                role,
                created_at: row.created_at,
            },
        })
    }

    /// Both steps at once (the API's sign-in).
    pub async fn sign_in(
        &self,
        email: &str,
        password: String,
        code: &str,
        from: Option<IpAddr>,
    ) -> Result<Session> {
        let pending = self.check_password(email, password, from).await?;
        self.check_code(&pending.token, code, from).await
    }

    /// The person an ACTIVE, unexpired session token names.
    pub async fn authenticate(&self, token: &str) -> Result<Option<SignedIn>> {
        if !looks_like_token(token) {
            return Ok(None);
        }
        let hash = token_hash(token);
        let row = sqlx::query_as::<_, (i64, String, String)>(
            r#"SELECT st.id, st.email, st.role
               FROM staff_sessions s JOIN staff st ON st.id = s.staff_id
               WHERE s.token_hash = $1 AND s.stage = 'ACTIVE' AND s.expires_at > now()"#,
        )
        .bind(&hash)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|(id, email, role)| {
            Ok(SignedIn {
                id,
                email,
                role: StaffRole::parse(&role)
                    .ok_or_else(|| Error::Internal(format!("staff role {role:?}")))?,
                session: hash,
            })
        })
        .transpose()
    }

    /// Ends the session at once (its row is deleted), with its audit row; a tool has
    /// no session and signs out of nothing.
    pub async fn sign_out(&self, by: &Acting) -> Result<()> {
        let Actor::Staff(signed_in) = &by.actor else {
            return Ok(());
        };
        let mut tx = self.pool.begin().await?;
        sqlx::query(r#"DELETE FROM staff_sessions WHERE token_hash = $1"#)
            .bind(&signed_in.session)
            .execute(&mut *tx)
            .await?;
        audit::record(
            &mut *tx,
            by,
            Entry {
                action: AuditAction::SignOut,
                target: None,
                reason: None,
                outcome: AuditOutcome::Done,
                detail: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Forgets a SECOND_FACTOR session (the console's "start over").
    pub async fn drop_pending(&self, token: &str) -> Result<()> {
        sqlx::query(
            r#"DELETE FROM staff_sessions WHERE token_hash = $1 AND stage = 'SECOND_FACTOR'"#,
        )
        .bind(token_hash(token))
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
