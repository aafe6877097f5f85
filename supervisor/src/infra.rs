//! Finding PostgreSQL and Redis for the run command: the configured ones, else the
//! local defaults, else private servers started from the installed binaries under its
//! data directory, else a message saying exactly how to get them.

use std::{
    path::{Path, PathBuf},
    str::FromStr,
    time::Duration,
};

use anyhow::{bail, Context};
use sqlx::{postgres::PgConnectOptions, ConnectOptions, Connection};

use crate::private_postgres::PrivatePostgres;
pub use crate::private_postgres::{postgres_bin_dirs, INITDB_ARGS};
use crate::private_redis::{self, PrivateRedis};

/// Port of the private PostgreSQL: not 5432, so it never collides with a system one,
/// and below the kernel's ephemeral range (32768 and up), where any process asking for
/// port 0 may be handed it first.
pub const PRIVATE_PG_PORT: u16 = 25432;
/// Port of the private Redis, below the ephemeral range for the same reason.
pub const PRIVATE_REDIS_PORT: u16 = 26379;
const LOCAL_ADMIN_URL: &str = "postgres://postgres:postgres@127.0.0.1:5432/postgres";
const LOCAL_REDIS_URL: &str = "redis://127.0.0.1:6379/";
/// The database the system uses when `DATABASE_URL` names none.
pub const DEFAULT_DATABASE: &str = "paysaga";

/// Where a dependency came from, for the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Configured,
    LocalDefault,
    Private(PathBuf),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Configured => f.write_str("from the environment"),
            Origin::LocalDefault => f.write_str("already running on the default local port"),
            Origin::Private(dir) => write!(f, "private server started in {}", dir.display()),
        }
    }
}

/// PostgreSQL and Redis for one run. Private servers it started are stopped by `stop`
/// or on drop.
pub struct Infra {
    /// Administrator URL on the paysaga database (bootstrap, invariant checks).
    pub admin_url: String,
    pub redis_url: String,
    pub pg_origin: Origin,
    pub redis_origin: Origin,
    private_pg: Option<PrivatePostgres>,
    private_redis: Option<PrivateRedis>,
}

/// Forces private servers even when local ones are running (`paysaga up --private`).
#[derive(Debug, Clone, Copy, Default)]
pub struct InfraChoice {
    pub force_private: bool,
}

impl Infra {
    pub async fn acquire(data_dir: &Path, choice: InfraChoice) -> anyhow::Result<Self> {
        let (server_admin, database, pg_origin, private_pg) = postgres(data_dir, choice).await?;
        let admin_url = with_database(&server_admin, &database)?;
        let (redis_url, redis_origin, private_redis) = match redis(data_dir, choice).await {
            Ok(r) => r,
            Err(e) => {
                if let Some(pg) = &private_pg {
                    pg.stop();
                }
                return Err(e);
            }
        };
        Ok(Self {
            admin_url,
            redis_url,
            pg_origin,
            redis_origin,
            private_pg,
            private_redis,
        })
    }

    /// The administrator URL with its password hidden, for printing.
    pub fn admin_url_redacted(&self) -> String {
        redact(&self.admin_url)
    }

    /// Stops the private servers this run started; leaves others alone.
    pub fn stop(&mut self) {
        if let Some(mut redis) = self.private_redis.take() {
            redis.kill();
        }
        if let Some(pg) = self.private_pg.take() {
            pg.stop();
        }
    }
}

impl Drop for Infra {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `url` with its password replaced by `***`.
pub fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

fn with_database(url: &str, database: &str) -> anyhow::Result<String> {
    let mut u = reqwest::Url::parse(url).with_context(|| format!("not a URL: {}", redact(url)))?;
    u.set_path(&format!("/{database}"));
    Ok(u.to_string())
}

pub(crate) async fn pg_answers(url: &str) -> Result<(), sqlx::Error> {
    let opts = PgConnectOptions::from_str(url)?.disable_statement_logging();
    let conn = tokio::time::timeout(
        Duration::from_secs(3),
        sqlx::PgConnection::connect_with(&opts),
    )
    .await
    .map_err(|_| sqlx::Error::PoolTimedOut)??;
    conn.close().await
}

type PgChoice = (String, String, Origin, Option<PrivatePostgres>);

async fn postgres(data_dir: &Path, choice: InfraChoice) -> anyhow::Result<PgChoice> {
    let database_url = std::env::var("DATABASE_URL")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let admin_env = std::env::var("ADMIN_DATABASE_URL")
        .ok()
        .filter(|v| !v.trim().is_empty());
    if database_url.is_some() || admin_env.is_some() {
        let database = database_url
            .as_deref()
            .and_then(|u| PgConnectOptions::from_str(u).ok())
            .and_then(|o| o.get_database().map(str::to_owned))
            .unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
        // The bootstrap needs an administrator; DATABASE_URL alone is used as one.
        let admin = admin_env.or(database_url).unwrap_or_default();
        let server_admin = with_database(&admin, "postgres")?;
        pg_answers(&server_admin).await.with_context(|| {
            format!(
                "cannot connect to PostgreSQL as administrator at {} (set ADMIN_DATABASE_URL to a \
                 superuser or CREATEROLE+CREATEDB role)",
                redact(&server_admin)
            )
        })?;
        return Ok((server_admin, database, Origin::Configured, None));
    }
    if !choice.force_private {
        match pg_answers(LOCAL_ADMIN_URL).await {
            Ok(()) => {
                return Ok((
                    LOCAL_ADMIN_URL.to_owned(),
                    DEFAULT_DATABASE.to_owned(),
                    Origin::LocalDefault,
                    None,
                ))
            }
            Err(e) if e.as_database_error().is_some() => bail!(
                "PostgreSQL on 127.0.0.1:5432 refused the default administrator ({}): {e}\n\
                 set ADMIN_DATABASE_URL=postgres://<superuser>:<password>@127.0.0.1:5432/postgres",
                redact(LOCAL_ADMIN_URL)
            ),
            Err(_) => {}
        }
    }
    let pg = PrivatePostgres::start(&data_dir.join("postgres"), PRIVATE_PG_PORT).await?;
    let url = format!("postgres://postgres@127.0.0.1:{PRIVATE_PG_PORT}/postgres");
    let origin = Origin::Private(pg.dir.clone());
    Ok((url, DEFAULT_DATABASE.to_owned(), origin, Some(pg)))
}

async fn redis_answers(url: &str) -> anyhow::Result<()> {
    let client = redis::Client::open(url)?;
    let mut conn = tokio::time::timeout(
        Duration::from_secs(3),
        client.get_multiplexed_async_connection(),
    )
    .await
    .context("Redis did not answer within 3s")??;
    let _: String = redis::cmd("PING").query_async(&mut conn).await?;
    Ok(())
}

async fn redis(
    data_dir: &Path,
    choice: InfraChoice,
) -> anyhow::Result<(String, Origin, Option<PrivateRedis>)> {
    if let Some(url) = std::env::var("REDIS_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        redis_answers(&url)
            .await
            .with_context(|| format!("cannot reach Redis at {}", redact(&url)))?;
        return Ok((url, Origin::Configured, None));
    }
    if !choice.force_private && redis_answers(LOCAL_REDIS_URL).await.is_ok() {
        return Ok((LOCAL_REDIS_URL.to_owned(), Origin::LocalDefault, None));
    }
    if private_redis::program().is_none() {
        bail!(missing_message("Redis"))
    }
    let dir = data_dir.join("redis");
    let redis = PrivateRedis::start_in(&dir, PRIVATE_REDIS_PORT).await?;
    Ok((redis.url(), Origin::Private(dir), Some(redis)))
}

pub(crate) fn missing_message(what: &str) -> String {
    format!(
        "{what} is not reachable and no local {what} binaries were found.\n\
         Get PostgreSQL and Redis in one of these ways, then run the command again:\n  \
         - Debian/Ubuntu: sudo apt-get install -y postgresql redis-server\n  \
         - Docker:        docker compose up -d postgres redis\n  \
         - Elsewhere:     set DATABASE_URL (or ADMIN_DATABASE_URL) and REDIS_URL"
    )
}

/// An executable named `name` on PATH or in one of `extra` directories.
pub(crate) fn which(name: &str, extra: &[PathBuf]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    extra
        .iter()
        .cloned()
        .chain(std::env::split_paths(&path))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
