//! PostgreSQL: pools bound to a service's own schema, its migrations, and the
//! administrator's bootstrap of roles and schemas.

use std::{str::FromStr, time::Duration};

use sqlx::{
    migrate::Migrator,
    postgres::{PgConnectOptions, PgPoolOptions},
    ConnectOptions, Connection, Executor, PgConnection, PgPool,
};

/// The service roles and the schema each runs in.
pub const ROLES: [(&str, &str); 4] = [
    ("account_app", "account_service"),
    ("order_app", "order_service"),
    ("payment_app", "payment_service"),
    ("member_app", "member_service"),
];

/// The roles that own each schema and run its migrations. A running service logs in as
/// its `_app` role, which has only the table rights its grants file lists.
pub const MIGRATORS: [(&str, &str); 4] = [
    ("account_migrator", "account_service"),
    ("order_migrator", "order_service"),
    ("payment_migrator", "payment_service"),
    ("member_migrator", "member_service"),
];

/// Per schema: what its runtime role may do, re-applied after every migration run.
const GRANTS: [(&str, &str); 4] = [
    (
        "account_service",
        include_str!("../../migrations/grants/account_service.sql"),
    ),
    (
        "order_service",
        include_str!("../../migrations/grants/order_service.sql"),
    ),
    (
        "payment_service",
        include_str!("../../migrations/grants/payment_service.sql"),
    ),
    (
        "member_service",
        include_str!("../../migrations/grants/member_service.sql"),
    ),
];

/// The migrator role that owns `schema`.
pub fn migrator_of(schema: &str) -> Option<&'static str> {
    MIGRATORS
        .iter()
        .find(|(_, s)| *s == schema)
        .map(|(r, _)| *r)
}

/// DEVELOPMENT ONLY password of every service role created by the bootstrap.
pub const DEV_ROLE_PASSWORD: &str = "paysaga-dev";

/// The password the bootstrap gives the service roles it creates (roles that exist
/// already are left as they are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolePasswords {
    /// DEVELOPMENT ONLY: every role [`DEV_ROLE_PASSWORD`], which the services refuse
    /// outside development mode.
    Development,
    /// None: a role cannot log in with a password until the operator gives it its own
    /// (`ALTER ROLE ... PASSWORD`).
    Unset,
}

const ROLES_SQL: &str = include_str!("../../migrations/bootstrap/01_roles.sql");
const SCHEMAS_SQL: &str = include_str!("../../migrations/bootstrap/02_schemas.sql");
/// Arbitrary, fixed: with a schema's hash, serialises re-applying its grants.
const GRANTS_LOCK: i32 = 0x7061_7973;
/// Arbitrary, fixed: serialises bootstraps across processes.
const BOOTSTRAP_LOCK: i64 = 0x0070_6179_7361_6761;

/// A pool whose connections see only `schema` (via `search_path`), so unqualified
/// names in a service's SQL and its migration table land in its own schema.
///
/// Its connections never choose a sequential scan while an index can answer
/// (`enable_seqscan = off`). Every statement a service runs is meant to be served by
/// an index, but a drop starts on near-empty tables: a prepared statement's generic
/// plan, made once per connection while a table holds a hundred rows, reads the whole
/// table (a hash join over a sequential scan), and each pooled connection kept that
/// plan while the table grew to tens of thousands of rows within the drop. The
/// benchmark saw a batch's step record read every payment ever made.
///
/// JIT compilation is off too: it pays off for long analytical queries, never for a
/// service's short statements, and a plan that keeps a disabled sequential scan (a sum
/// over the sixteen merchant shards) carries a cost high enough to trigger it: 80 ms
/// of compiling for a lookup that runs in microseconds.
///
/// And every statement runs on its generic plan (`plan_cache_mode =
/// force_generic_plan`): with scans disabled, a generic plan's cost can exceed what
/// PostgreSQL expects of a custom one, and it then re-plans the statement at every
/// execution. The batch statements are large, so that planning was a lone checkout's
/// largest database cost (3.7 ms of PostgreSQL CPU against 2.5 ms with generic plans).
pub async fn connect(url: &str, schema: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    pool_with(url, schema, max_connections, &[]).await
}

/// A pooled connection idle for longer than this is pinged before it is handed out. One
/// in steady use is not: under load that ping was one more round trip in front of every
/// statement, while the connections a failover or a restart breaks are the ones left
/// idle through it (a connection that breaks in use fails its statement, and sqlx's ping
/// on release then drops it).
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

async fn pool_with(
    url: &str,
    schema: &str,
    max_connections: u32,
    extra: &[(&str, &str)],
) -> Result<PgPool, sqlx::Error> {
    let options = PgConnectOptions::from_str(url)?
        .options([
            ("search_path", schema),
            ("enable_seqscan", "off"),
            ("jit", "off"),
            ("plan_cache_mode", "force_generic_plan"),
        ])
        .options(extra.iter().copied())
        .application_name(schema)
        .log_statements(tracing::log::LevelFilter::Debug)
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_millis(500));
    PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(5))
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_AFTER_IDLE {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
        .connect_with(options)
        .await
}

/// One field of every row, as the array bound for an `UNNEST`/`ANY` parameter of a
/// statement that writes or matches many rows at once.
pub fn column<'a, T, U>(rows: &'a [T], field: impl FnMut(&'a T) -> U) -> Vec<U> {
    rows.iter().map(field).collect()
}

/// Whether `e` says the database cannot serve right now, as during a failover, rather
/// than that the request or the code is wrong: no connection (refused, broken, closed
/// mid-statement: `Io`; none free in time: `PoolTimedOut`; the pool shut: `PoolClosed`),
/// or the server refusing for its own state. SQLSTATE class 08 (connection exception),
/// 57P01 `admin_shutdown` (the server was told to stop, or terminated the session),
/// 57P02 `crash_shutdown` (another backend crashed), 57P03 `cannot_connect_now`
/// (starting up, shutting down, in recovery) and 25006 `read_only_sql_transaction`
/// (a connection that reached a standby, before its proxy knew it was not the primary).
///
/// Services answer these with 503 `UNAVAILABLE`: retryable, and the outcome of a
/// statement cut mid-way is unknown to the caller, which retries under its key.
pub fn unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| unavailable_sqlstate(&c)),
        _ => false,
    }
}

/// The SQLSTATEs of [`unavailable`].
pub fn unavailable_sqlstate(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "25006")
}

/// How a service's own connections are limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `statement_timeout`: a statement running longer is cancelled (57014). 0: none.
    pub statement_timeout_ms: u64,
    /// `idle_in_transaction_session_timeout`: a session that holds a transaction open
    /// without running anything is ended, so a stalled task cannot keep row locks.
    pub idle_in_transaction_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            statement_timeout_ms: 5_000,
            idle_in_transaction_ms: 30_000,
        }
    }
}

/// A service's pool, connected as its runtime role, with [`Limits`] on every
/// connection; see [`connect`] for the planner settings it also carries.
pub async fn connect_limited(
    url: &str,
    schema: &str,
    max_connections: u32,
    limits: Limits,
) -> Result<PgPool, sqlx::Error> {
    let statement = limits.statement_timeout_ms.to_string();
    let idle = limits.idle_in_transaction_ms.to_string();
    pool_with(
        url,
        schema,
        max_connections,
        &[
            ("statement_timeout", statement.as_str()),
            ("idle_in_transaction_session_timeout", idle.as_str()),
        ],
    )
    .await
}

/// Why a service's schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("connecting as the schema's migrator")]
    Connect(#[source] sqlx::Error),
    #[error("running migrations")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    #[error("granting the runtime role its rights")]
    Grant(#[source] sqlx::Error),
    #[error("reading which migrations are applied")]
    Read(#[source] sqlx::Error),
    #[error(
        "{pending} migration(s) of schema {schema} are not applied; run this service once \
         with MIGRATION_DATABASE_URL (the schema's migrator role) to apply them"
    )]
    Pending { schema: String, pending: usize },
    #[error("no grants are defined for schema {0}")]
    UnknownSchema(String),
}

/// Brings `schema` up to date as its migrator (`migration_url` logs in as the role that
/// owns the schema), then re-applies the schema's grants file in one transaction, so
/// the runtime role has exactly the rights listed there on every table that exists.
/// sqlx holds an advisory lock while it migrates, so two processes starting at once do
/// not collide, and applied migrations are skipped. No statement timeout: a migration
/// may rightly take long.
pub async fn migrate(
    migration_url: &str,
    schema: &str,
    migrator: &Migrator,
) -> Result<(), MigrationError> {
    let grants = GRANTS
        .iter()
        .find(|(s, _)| *s == schema)
        .map(|(_, sql)| *sql)
        .ok_or_else(|| MigrationError::UnknownSchema(schema.to_owned()))?;
    let options = PgConnectOptions::from_str(migration_url)
        .map_err(MigrationError::Connect)?
        .options([("search_path", schema)])
        .application_name("paysaga-migrator");
    // A pool of one rather than a bare connection: sqlx's migrator future over a
    // `&mut PgConnection` is not `Send` for every lifetime, which a service's start
    // (spawned on the runtime) needs.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .map_err(MigrationError::Connect)?;
    let migrated = async {
        migrator.run(&pool).await.map_err(MigrationError::Migrate)?;
        // Concurrent GRANTs on one table fail ("tuple concurrently updated"), so
        // instances starting together take turns, like sqlx does for migrations.
        let mut tx = pool.begin().await.map_err(MigrationError::Grant)?;
        tx.execute(
            sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
                .bind(GRANTS_LOCK)
                .bind(schema),
        )
        .await
        .map_err(MigrationError::Grant)?;
        tx.execute(grants).await.map_err(MigrationError::Grant)?;
        tx.commit().await.map_err(MigrationError::Grant)
    }
    .await;
    pool.close().await;
    migrated
}

/// Fails unless every migration `migrator` holds is applied to the pool's schema: a
/// service started without migration rights refuses to run on a schema older than
/// its code.
pub async fn ensure_migrated(
    pool: &PgPool,
    schema: &str,
    migrator: &Migrator,
) -> Result<(), MigrationError> {
    let applied: Vec<i64> = sqlx::query_scalar(
        r#"
        SELECT version
        FROM _sqlx_migrations
        WHERE success
        "#,
    )
    .fetch_all(pool)
    .await
    .map_err(MigrationError::Read)?;
    let pending = migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version))
        .count();
    if pending > 0 {
        return Err(MigrationError::Pending {
            schema: schema.to_owned(),
            pending,
        });
    }
    Ok(())
}

/// A service's start: migrate as the schema's migrator when given its URL, connect as
/// the runtime role with `limits`, and refuse a schema that is not up to date.
pub async fn open(
    url: &str,
    migration_url: Option<&str>,
    schema: &str,
    max_connections: u32,
    limits: Limits,
    migrator: &Migrator,
) -> anyhow::Result<PgPool> {
    use anyhow::Context;
    if let Some(m) = migration_url {
        migrate(m, schema, migrator)
            .await
            .with_context(|| format!("migrating schema {schema}"))?;
    }
    let pool = connect_limited(url, schema, max_connections, limits)
        .await
        .with_context(|| format!("connecting to schema {schema}"))?;
    ensure_migrated(&pool, schema, migrator).await?;
    Ok(pool)
}

/// Creates the service roles (cluster-wide) with `passwords` and, in the database
/// `admin_url` names, their schemas. Safe to run twice and concurrently. Needs an
/// administrator.
pub async fn bootstrap(admin_url: &str, passwords: RolePasswords) -> Result<(), sqlx::Error> {
    let options = PgConnectOptions::from_str(admin_url)?;
    // Roles are cluster-wide while advisory locks are per database, so all role creation
    // is serialised through the `postgres` maintenance database.
    let mut maintenance = PgConnection::connect_with(&options.clone().database("postgres")).await?;
    maintenance
        .execute(sqlx::query("SELECT pg_advisory_lock($1)").bind(BOOTSTRAP_LOCK))
        .await?;
    let password = match passwords {
        RolePasswords::Development => DEV_ROLE_PASSWORD,
        RolePasswords::Unset => "",
    };
    let created = match maintenance
        .execute(
            sqlx::query("SELECT set_config('paysaga.role_password', $1, false)").bind(password),
        )
        .await
    {
        Ok(_) => maintenance.execute(ROLES_SQL).await,
        Err(e) => Err(e),
    };
    maintenance
        .execute(sqlx::query("SELECT pg_advisory_unlock($1)").bind(BOOTSTRAP_LOCK))
        .await?;
    created?;
    maintenance.close().await?;

    let mut conn = PgConnection::connect_with(&options).await?;
    let mut tx = conn.begin().await?;
    tx.execute(sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(BOOTSTRAP_LOCK))
        .await?;
    tx.execute(SCHEMAS_SQL).await?;
    tx.commit().await?;
    conn.close().await
}

/// Creates database `name` if it does not exist (connected as an administrator).
pub async fn create_database(admin_url: &str, name: &str) -> Result<(), sqlx::Error> {
    let options = PgConnectOptions::from_str(admin_url)?.database("postgres");
    let mut conn = PgConnection::connect_with(&options).await?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_optional(&mut conn)
        .await?;
    if exists.is_none() {
        let sql = format!(r#"CREATE DATABASE "{}""#, name.replace('"', "\"\""));
        if let Err(e) = conn.execute(sql.as_str()).await {
            // Lost a race with another creator: the database exists, which is the goal.
            if e.as_database_error().and_then(|d| d.code()).as_deref() != Some("42P04") {
                return Err(e);
            }
        }
    }
    conn.close().await
}

/// The development URL of the migrator that owns the schema `app_url`'s runtime role
/// works in: `account_app` -> `account_migrator`, same host and database. `None` when
/// the URL's user is not one of the runtime roles.
pub fn dev_migrator_url(app_url: &str) -> Option<String> {
    let options = PgConnectOptions::from_str(app_url).ok()?;
    let user = options.get_username();
    let schema = ROLES.iter().find(|(r, _)| *r == user).map(|(_, s)| *s)?;
    role_url(app_url, migrator_of(schema)?).ok()
}

/// `url` with its user and password replaced by the development credentials of `role`;
/// the rest (host, database, and the query: `sslmode`, `sslrootcert`, ...) as written.
pub fn role_url(url: &str, role: &str) -> Result<String, sqlx::Error> {
    let options = PgConnectOptions::from_str(url)?;
    if let Ok(mut u) = reqwest::Url::parse(url) {
        if options.get_database().is_none() {
            u.set_path("/postgres");
        }
        if u.set_username(role).is_ok() && u.set_password(Some(DEV_ROLE_PASSWORD)).is_ok() {
            return Ok(u.to_string());
        }
    }
    Ok(format!(
        "postgres://{role}:{DEV_ROLE_PASSWORD}@{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("postgres")
    ))
}
