//! Staff accounts: an admin creates one (email, password, role) and hands its owner the
//! second factor's secret and the recovery codes, shown this once.

use chrono::{DateTime, Utc};
use paysaga_common::{error::codes as common_codes, ApiError};
use paysaga_contracts::staff::api::{ActionReason, CreateStaff, StaffCreated, StaffMember};
use sqlx::{Postgres, Transaction};

use crate::{
    audit::{self, Entry},
    error::{Error, Result},
    totp, Acting, AuditAction, AuditOutcome, Staff, StaffRole,
};

use paysaga_contracts::schemas::MAX_EMAIL_LEN as MAX_EMAIL;
/// The longest reason a person may type.
pub const MAX_REASON: usize = 500;

/// An email as staff accounts keep it: trimmed and lower-cased, one `@` with something
/// either side, no spaces or colons (a colon would break the otpauth label).
pub fn normal_email(raw: &str) -> Option<String> {
    let e = raw.trim().to_lowercase();
    let (local, domain) = e.split_once('@')?;
    let ok = !local.is_empty()
        && !domain.is_empty()
        && !domain.contains('@')
        && e.len() <= MAX_EMAIL
        && !e
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ':');
    ok.then_some(e)
}

/// A reason as typed: trimmed; `None` when empty; refused above 500 characters.
pub fn reason(raw: Option<&str>) -> Result<Option<String>> {
    match raw.map(str::trim).filter(|r| !r.is_empty()) {
        None => Ok(None),
        Some(r) if r.chars().count() > MAX_REASON => Err(Error::ReasonInvalid),
        // Kept as text in PostgreSQL (which holds no NUL) and shown to people: tabs and
        // line breaks only.
        Some(r)
            if r.chars()
                .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')) =>
        {
            Err(Error::ReasonInvalid)
        }
        Some(r) => Ok(Some(r.to_owned())),
    }
}

/// The reason an action's body may carry (`{"reason": "..."}`, `paysaga_contracts`'
/// `ActionReason`); an empty body, or JSON `null`, gives none. A body that is no such
/// object is 422 `INVALID_BODY`, a reason too long 422 `REASON_INVALID`.
pub fn reason_from_body(body: &[u8]) -> std::result::Result<Option<String>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let given: Option<ActionReason> = serde_json::from_slice(body)
        .map_err(|e| ApiError::unprocessable(common_codes::INVALID_BODY, format!("body: {e}")))?;
    reason(given.and_then(|g| g.reason).as_deref()).map_err(|e| {
        e.api()
            .unwrap_or_else(|| ApiError::unprocessable(common_codes::INVALID_BODY, "reason"))
    })
}

#[derive(sqlx::FromRow)]
pub(crate) struct StaffRow {
    pub id: i64,
    pub email: String,
    pub password_hash: String,
    pub role: String,
    pub created_at: DateTime<Utc>,
}

impl StaffRow {
    pub(crate) fn role(&self) -> Result<StaffRole> {
        StaffRole::parse(&self.role)
            .ok_or_else(|| Error::Internal(format!("staff role {:?}", self.role)))
    }

    pub(crate) fn member(&self) -> Result<StaffMember> {
        Ok(StaffMember {
            id: self.id,
            email: self.email.clone(),
            role: self.role()?,
            created_at: self.created_at,
        })
    }
}

pub(crate) async fn by_email(staff: &Staff, email: &str) -> Result<Option<StaffRow>> {
    Ok(sqlx::query_as::<_, StaffRow>(
        r#"SELECT id, email, password_hash, role, created_at
           FROM staff WHERE email = $1"#,
    )
    .bind(email)
    .fetch_optional(&staff.pool)
    .await?)
}

/// Inserts an account with its recovery codes; `None` if the email is taken.
async fn insert(
    tx: &mut Transaction<'_, Postgres>,
    email: &str,
    phc: &str,
    role: StaffRole,
    sealed_secret: &[u8],
    recovery: &[String],
) -> Result<Option<StaffRow>> {
    let row = sqlx::query_as::<_, StaffRow>(
        r#"INSERT INTO staff (email, password_hash, role, totp_secret_sealed)
           VALUES ($1, $2, $3, $4)
           ON CONFLICT ON CONSTRAINT staff_email_unique DO NOTHING
           RETURNING id, email, password_hash, role, created_at"#,
    )
    .bind(email)
    .bind(phc)
    .bind(role.as_str())
    .bind(sealed_secret)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let hashes: Vec<Vec<u8>> = recovery.iter().map(|c| totp::recovery_hash(c)).collect();
    sqlx::query(
        r#"INSERT INTO staff_recovery_codes (staff_id, code_hash)
           SELECT $1, h FROM UNNEST($2::BYTEA[]) AS h"#,
    )
    .bind(row.id)
    .bind(&hashes)
    .execute(&mut **tx)
    .await?;
    Ok(Some(row))
}

impl Staff {
    /// Whether any admin exists (until one does, the operator tools' credential may make
    /// one outside development mode).
    pub async fn has_admin(&self) -> Result<bool> {
        Ok(sqlx::query_scalar::<_, bool>(
            r#"SELECT EXISTS (SELECT 1 FROM staff WHERE role = 'ADMIN')"#,
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// An admin creates an account: checked like a member's (email, the shared password
    /// policy), written with its audit row in one transaction.
    pub async fn create(&self, by: &Acting, req: CreateStaff) -> Result<StaffCreated> {
        let reason = reason(Some(&req.reason))?.ok_or(Error::ReasonInvalid)?;
        let email = normal_email(&req.email).ok_or(Error::EmailInvalid)?;
        let local = email.split_once('@').map(|(l, _)| l);
        paysaga_common::password::check(&req.password, local).map_err(Error::WeakPassword)?;
        let phc = self.passwords.hash(req.password).await?;
        let secret = totp::new_secret();
        let recovery = totp::new_recovery_codes();
        let mut tx = self.pool.begin().await?;
        let sealed = self.config.secret_key.seal(&email, &secret);
        let Some(row) = insert(&mut tx, &email, &phc, req.role, &sealed, &recovery).await? else {
            return Err(Error::EmailTaken);
        };
        audit::record(
            &mut *tx,
            by,
            Entry {
                action: AuditAction::StaffCreated,
                target: Some(email.clone()),
                reason: Some(reason),
                outcome: AuditOutcome::Done,
                detail: Some(req.role.as_str().to_owned()),
            },
        )
        .await?;
        tx.commit().await?;
        tracing::info!(staff_id = row.id, role = %req.role, "staff account created");
        Ok(StaffCreated {
            staff: row.member()?,
            totp_secret: totp::base32(&secret),
            otpauth_url: totp::otpauth_url(&secret, &email)
                .ok_or_else(|| Error::Internal("otpauth url".into()))?,
            recovery_codes: recovery,
        })
    }

    /// Development mode only: the development admin ([`crate::dev`]) exists, with its
    /// public password and TOTP secret (an existing one is left as it is).
    pub async fn ensure_dev_admin(&self) -> Result<()> {
        if !self.config.dev_admin {
            return Ok(());
        }
        let secret = totp::from_base32(crate::dev::ADMIN_TOTP_SECRET)
            .ok_or_else(|| Error::Internal("the development TOTP secret".into()))?;
        let phc = self
            .passwords
            .hash(crate::dev::ADMIN_PASSWORD.to_owned())
            .await?;
        let mut tx = self.pool.begin().await?;
        if insert(
            &mut tx,
            crate::dev::ADMIN_EMAIL,
            &phc,
            StaffRole::Admin,
            &self
                .config
                .secret_key
                .seal(crate::dev::ADMIN_EMAIL, &secret),
            &[],
        )
        .await?
        .is_some()
        {
            tracing::warn!(
                email = crate::dev::ADMIN_EMAIL,
                "DEVELOPMENT ONLY: created the development staff admin (public password and TOTP secret)"
            );
        }
        tx.commit().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_kept_lower_cased_and_odd_ones_refused() {
        assert_eq!(
            normal_email("  Alice@Example.COM "),
            Some("alice@example.com".into())
        );
        for bad in ["", "alice", "@x", "a@", "a@b@c", "a b@c", "a:b@c"] {
            assert_eq!(normal_email(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reasons_are_trimmed_and_bounded() {
        assert_eq!(reason(Some("  why  ")).unwrap(), Some("why".into()));
        assert_eq!(reason(Some("   ")).unwrap(), None);
        assert_eq!(reason(None).unwrap(), None);
        assert!(reason(Some(&"x".repeat(501))).is_err());
        assert!(reason(Some("nul\u{0}inside")).is_err());
        assert!(reason(Some("bell\u{7}")).is_err());
        assert_eq!(
            reason(Some("two\nlines\tand a tab")).unwrap(),
            Some("two\nlines\tand a tab".into())
        );
    }
}
