//! Staff: the people who run paysaga. Each has an account kept by the orchestrator
//! (email, an Argon2id password hash made with the shared password rules, a TOTP second
//! factor and single-use recovery codes), signs in as themselves into a short-lived
//! server-side session, and acts in one role ([`StaffRole`]). Every change a person
//! makes is a row of the append-only audit trail ([`audit`]).
//!
//! The crate's tables live in the orchestrator's schema (`staff`, `staff_recovery_codes`,
//! `staff_sessions`, `audit_log`); the orchestrator merges [`routes`] into its router and
//! the console signs people in through [`Staff`]. Routes name the roles they admit with
//! [`Person`] (people only) or [`PersonOrTool`] (people, or the operator tools' service
//! credential), e.g. `Person<{ ADMIN }>`; see docs/security.md for the matrix.

pub mod accounts;
pub mod audit;
pub mod dev;
pub mod error;
pub mod extract;
pub mod routes;
pub mod secrets;
pub mod sessions;
pub mod totp;

use std::{net::IpAddr, num::NonZeroU32, sync::Arc, time::Duration};

use paysaga_common::{
    auth::ServiceRole,
    config::{self, ConfigError, Secrets},
    limits::MemberLimiter,
    password::{Argon2Params, HashError, Passwords},
};
use sqlx::PgPool;

pub use error::{Error, Result};
pub use extract::{FirstAdminOrPerson, Person, PersonOrTool};
pub use paysaga_contracts::staff::api::{AuditAction, AuditOutcome, StaffRole};

/// Allow lists of staff roles, the const parameter of [`Person`] and [`PersonOrTool`]:
/// `Person<{ OPERATOR | ADMIN }>`. Each route lists every role it admits (no role
/// implies another), so the matrix in docs/security.md reads straight off the code.
pub mod allow {
    pub const VIEWER: u8 = 1;
    pub const OPERATOR: u8 = 1 << 1;
    pub const ADMIN: u8 = 1 << 2;
    /// Every role: reads, and signing out.
    pub const ANY: u8 = VIEWER | OPERATOR | ADMIN;
}

/// A role's bit in an allow list.
pub const fn bit(role: StaffRole) -> u8 {
    match role {
        StaffRole::Viewer => allow::VIEWER,
        StaffRole::Operator => allow::OPERATOR,
        StaffRole::Admin => allow::ADMIN,
    }
}

/// A signed-in staff member, as their session names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    pub id: i64,
    pub email: String,
    pub role: StaffRole,
    /// The SHA-256 of the session's token: sign-out deletes that row.
    pub(crate) session: Vec<u8>,
}

/// Who acts: a person, or (on the API routes that still admit it) the operator tools'
/// service credential (tests, the benchmark's and the demo's set-up), which counts as
/// an admin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    Staff(SignedIn),
    Tool(ServiceRole),
}

impl Actor {
    /// The name the audit trail and the step log give the actor: the person's email, or
    /// `service:<role>`.
    pub fn name(&self) -> String {
        match self {
            Actor::Staff(s) => s.email.clone(),
            Actor::Tool(role) => format!("service:{role}"),
        }
    }

    pub fn staff_id(&self) -> Option<i64> {
        match self {
            Actor::Staff(s) => Some(s.id),
            Actor::Tool(_) => None,
        }
    }

    /// The role the actor acts in.
    pub fn role(&self) -> StaffRole {
        match self {
            Actor::Staff(s) => s.role,
            Actor::Tool(_) => StaffRole::Admin,
        }
    }
}

/// An actor and where their request came from, as the audit trail records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acting {
    pub actor: Actor,
    /// The client's address (the connection's peer).
    pub from: Option<IpAddr>,
}

/// The staff settings.
#[derive(Debug, Clone)]
pub struct StaffConfig {
    /// `ARGON2_MEMORY_KIB`, `ARGON2_ITERATIONS`, `ARGON2_PARALLELISM`: the shared
    /// password rules' cost (OWASP's minimum by default).
    pub argon2: Argon2Params,
    /// `STAFF_SESSION_TTL_SECS`, default 3600: how long a session lasts (not renewed).
    pub session_ttl: Duration,
    /// `STAFF_SIGN_IN_BURST` (default 10) attempts per email and per client address at
    /// once, then one more every `STAFF_SIGN_IN_PERIOD_SECS` (default 30).
    pub sign_in_burst: NonZeroU32,
    pub sign_in_period: Duration,
    /// `STAFF_OPERATOR_REFUND_LIMIT`, default 50000 (minor units): the largest payment
    /// an operator may refund; above it, an admin's.
    pub operator_refund_limit: i64,
    /// `STAFF_FOUR_EYES_ABOVE`, default 100000 (minor units): a refund of a payment
    /// above it is not carried out when asked for; it waits for an admin other than the
    /// one who asked (four eyes).
    pub four_eyes_above: i64,
    /// `STAFF_TOP_UP_FOUR_EYES_ABOVE`, default 100000 (minor units): a top-up above it
    /// is not carried out when asked for; it waits for an admin other than the one who
    /// asked (four eyes).
    pub top_up_four_eyes_above: i64,
    /// Development mode (`PAYSAGA_DEV_KEYS=1`) only: the development admin
    /// ([`dev`]) is created at start-up.
    pub dev_admin: bool,
    /// Development mode (and tests) only: the operator tools' service credential acts
    /// as an admin on the routes that name it ([`PersonOrTool`]). Otherwise only people
    /// act, and the tools' credential only makes the first admin ([`FirstAdminOrPerson`]).
    pub tools_act: bool,
    /// `STAFF_SECRET_KEY`: the key TOTP secrets are sealed with at rest
    /// ([`secrets`]); required outside development mode.
    pub secret_key: secrets::SecretKey,
}

impl StaffConfig {
    /// From the environment, the key with the service's other `secrets`; development
    /// mode creates the development admin.
    pub fn from_env(secrets: &mut Secrets) -> std::result::Result<Self, ConfigError> {
        let secret_key = secrets::SecretKey::from_secrets(secrets)?;
        let d = Self::local();
        let burst: u32 = config::parse("STAFF_SIGN_IN_BURST", d.sign_in_burst.get())?;
        Ok(Self {
            argon2: Argon2Params::from_env()?,
            session_ttl: Duration::from_secs(config::parse(
                "STAFF_SESSION_TTL_SECS",
                d.session_ttl.as_secs(),
            )?),
            sign_in_burst: NonZeroU32::new(burst.max(1)).expect("at least 1"),
            sign_in_period: Duration::from_secs(config::parse(
                "STAFF_SIGN_IN_PERIOD_SECS",
                d.sign_in_period.as_secs(),
            )?),
            operator_refund_limit: config::parse(
                "STAFF_OPERATOR_REFUND_LIMIT",
                d.operator_refund_limit,
            )?,
            four_eyes_above: config::parse("STAFF_FOUR_EYES_ABOVE", d.four_eyes_above)?,
            top_up_four_eyes_above: config::parse(
                "STAFF_TOP_UP_FOUR_EYES_ABOVE",
                d.top_up_four_eyes_above,
            )?,
            dev_admin: secrets.is_dev(),
            tools_act: secrets.is_dev(),
            secret_key,
        })
    }

    /// The defaults, with the production hashing cost.
    pub fn local() -> Self {
        Self {
            argon2: Argon2Params::OWASP,
            session_ttl: Duration::from_secs(3600),
            sign_in_burst: NonZeroU32::new(10).expect("non-zero"),
            sign_in_period: Duration::from_secs(30),
            operator_refund_limit: 50_000,
            four_eyes_above: 100_000,
            top_up_four_eyes_above: 100_000,
            dev_admin: false,
            tools_act: true,
            secret_key: secrets::SecretKey::development(),
        }
    }
}

/// Staff accounts, sessions and the audit trail over the orchestrator's pool; cheap to
/// clone.
#[derive(Clone)]
pub struct Staff {
    pub(crate) pool: PgPool,
    pub(crate) passwords: Passwords,
    pub(crate) config: Arc<StaffConfig>,
    /// Sign-in attempts per email and per client address.
    pub(crate) attempts: Arc<MemberLimiter>,
}

impl Staff {
    pub async fn new(pool: PgPool, config: StaffConfig) -> std::result::Result<Self, HashError> {
        // Staff sign in rarely: two hashes at a time are plenty.
        let passwords = Passwords::new(config.argon2, 2, "orchestrator_argon2_seconds").await?;
        Ok(Self {
            pool,
            passwords,
            attempts: Arc::new(MemberLimiter::every(
                config.sign_in_period,
                config.sign_in_burst,
            )),
            config: Arc::new(config),
        })
    }

    pub fn config(&self) -> &StaffConfig {
        &self.config
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}
