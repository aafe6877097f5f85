//! PostgreSQL: pools bound to a service's own schema, its migrations, and the
//! administrator's bootstrap of roles and schemas.

use std::{str::FromStr, time::Duration};

use sqlx::{
    migrate::Migrator,
    postgres::{PgConnectOptions, PgPoolOptions},
    ConnectOptions, Connection, Executor, PgConnection, PgPool,
};

/// The service roles and the schema each owns.
pub const ROLES: [(&str, &str); 4] = [
    ("account_app", "account_service"),
    ("order_app", "order_service"),
    ("payment_app", "payment_service"),
    ("member_app", "member_service"),
];

/// DEVELOPMENT ONLY password of every service role created by the bootstrap.
pub const DEV_ROLE_PASSWORD: &str = "paysaga-dev";

const ROLES_SQL: &str = include_str!("../../migrations/bootstrap/01_roles.sql");
const SCHEMAS_SQL: &str = include_str!("../../migrations/bootstrap/02_schemas.sql");
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
    let options = PgConnectOptions::from_str(url)?
        .options([
            ("search_path", schema),
            ("enable_seqscan", "off"),
            ("jit", "off"),
            ("plan_cache_mode", "force_generic_plan"),
        ])
        .application_name(schema)
        .log_statements(tracing::log::LevelFilter::Debug)
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_millis(500));
    PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options)
        .await
}

/// Runs a service's migrations. sqlx holds an advisory lock while it migrates, so two
/// processes starting at once do not collide, and applied migrations are skipped.
pub async fn migrate(
    pool: &PgPool,
    migrator: &Migrator,
) -> Result<(), sqlx::migrate::MigrateError> {
    migrator.run(pool).await
}

/// Creates the service roles (cluster-wide) and, in the database `admin_url` names,
/// their schemas. Safe to run twice and concurrently. Needs an administrator.
pub async fn bootstrap(admin_url: &str) -> Result<(), sqlx::Error> {
    let options = PgConnectOptions::from_str(admin_url)?;
    // Roles are cluster-wide while advisory locks are per database, so all role creation
    // is serialised through the `postgres` maintenance database.
    let mut maintenance = PgConnection::connect_with(&options.clone().database("postgres")).await?;
    maintenance
        .execute(sqlx::query("SELECT pg_advisory_lock($1)").bind(BOOTSTRAP_LOCK))
        .await?;
    let created = maintenance.execute(ROLES_SQL).await;
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

/// `url` with its user and password replaced by the development credentials of `role`.
pub fn role_url(url: &str, role: &str) -> Result<String, sqlx::Error> {
    let options = PgConnectOptions::from_str(url)?;
    Ok(format!(
        "postgres://{role}:{DEV_ROLE_PASSWORD}@{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("postgres")
    ))
}
