//! What every service reads and does alike around its own work: where it listens, how
//! it logs and the development values it runs with ([`Process`]), its database settings
//! ([`Database`]), and starting from the environment ([`serve_from_env`]).

use std::future::Future;

use anyhow::Context;

use sqlx::{migrate::Migrator, PgPool};
use tokio::net::TcpListener;

use crate::{
    config::{self, ConfigError, DevFallbacks, LogFormat, Secrets},
    db,
    server::{self, Shutdown},
    telemetry,
    tls::{ServerTls, Trust},
};

/// The settings of a service process itself, beside what the service does.
#[derive(Debug, Clone)]
pub struct Process {
    /// `LISTEN_ADDR`: the address bound when no supervisor hands a socket over.
    pub listen_addr: String,
    /// `METRICS_ADDR`: where `/metrics` is served, on a listener of its own (the API's
    /// listener never serves it). Unset: no metrics listener.
    pub metrics_addr: Option<String>,
    /// `LOG_FORMAT`: `json` or `pretty` (default).
    pub log_format: LogFormat,
    /// `TLS_CERT_FILE` and `TLS_KEY_FILE` (both, or neither): every listener of the
    /// service (the API's and the metrics one) serves TLS with them. Unset: plain HTTP.
    pub tls: Option<ServerTls>,
    /// `TLS_CA_FILE`: roots the service's calls to other services trust beside the
    /// platform's (a private CA). Unset: the platform's only.
    pub trust: Trust,
    /// The development keys and passwords in use (development mode only), warned at start.
    pub dev_fallbacks: DevFallbacks,
}

impl Process {
    /// Finishes `secrets` (every missing one named at once, before any other setting is
    /// judged), then reads `LISTEN_ADDR` (`default_listen_addr` when unset), `LOG_FORMAT`
    /// and the TLS settings (their files are read and checked now).
    pub fn from_env(secrets: Secrets, default_listen_addr: &str) -> Result<Self, config::Error> {
        let dev_fallbacks = secrets.finish()?;
        Ok(Self {
            listen_addr: config::string("LISTEN_ADDR", default_listen_addr),
            metrics_addr: std::env::var("METRICS_ADDR")
                .ok()
                .map(|a| a.trim().to_owned())
                .filter(|a| !a.is_empty()),
            log_format: config::parse("LOG_FORMAT", LogFormat::Pretty)?,
            tls: ServerTls::from_env()?,
            trust: Trust::from_env()?,
            dev_fallbacks,
        })
    }

    /// For tests and tools: `listen_addr`, logs for people, plain HTTP, the platform's
    /// roots, no development fallbacks.
    pub fn local(listen_addr: &str) -> Self {
        Self {
            listen_addr: listen_addr.to_owned(),
            metrics_addr: None,
            log_format: LogFormat::Pretty,
            tls: None,
            trust: Trust::default(),
            dev_fallbacks: DevFallbacks::default(),
        }
    }

    /// An HTTP client for calls to other services with a per-request `timeout`,
    /// trusting [`Process::trust`].
    pub fn http_client(&self, timeout: std::time::Duration) -> reqwest::Client {
        crate::client::http_client_trusting(timeout, &self.trust)
    }

    /// Serves `app` on `listener` until `shutdown` ([`server::serve_tls`]), over TLS
    /// when [`Process::tls`] is set.
    pub async fn serve(
        &self,
        listener: TcpListener,
        app: axum::Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        server::serve_tls(listener, app, shutdown, self.tls.as_ref()).await
    }
}

/// A service's PostgreSQL: its runtime role's URL, the migrator's, and the pool.
#[derive(Debug, Clone)]
pub struct Database {
    /// `DATABASE_URL`: the service's runtime role. Required; the development password
    /// only with `PAYSAGA_DEV_KEYS=1`.
    pub url: String,
    /// `MIGRATION_DATABASE_URL`: the schema's migrator role, to apply migrations and
    /// grants at start; see [`config::migration_database_url`].
    pub migration_url: Option<String>,
    /// `DB_MAX_CONNECTIONS`, default 16.
    pub max_connections: u32,
    /// `DB_STATEMENT_TIMEOUT_MS`, `DB_IDLE_IN_TRANSACTION_MS`: limits on every
    /// connection of the service.
    pub limits: db::Limits,
}

/// The pool size a service starts with when `DB_MAX_CONNECTIONS` is unset.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 16;

impl Database {
    /// `DATABASE_URL` (in development mode [`dev_database_url`] of `role` when unset) and
    /// `MIGRATION_DATABASE_URL`, read with the other secrets; the pool settings follow
    /// with [`DatabaseUrls::with_pool_from_env`] once every secret has been judged.
    pub fn urls_from_env(secrets: &mut Secrets, role: &str) -> Result<DatabaseUrls, ConfigError> {
        let url = config::database_url(secrets, &dev_database_url(role))?;
        let migration_url = config::migration_database_url(secrets, &url)?;
        Ok(DatabaseUrls { url, migration_url })
    }

    /// For tests and tools: `url` (the migrator derived from it when it carries the
    /// development password), the default pool and limits.
    pub fn local(url: impl Into<String>) -> Self {
        let url = url.into();
        Self {
            migration_url: db::dev_migrator_url(&url),
            url,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            limits: db::Limits::default(),
        }
    }

    /// Migrates `schema` when a migrator URL is set, connects as the runtime role and
    /// checks the schema is as new as `migrator` ([`db::open`]).
    pub async fn open(&self, schema: &str, migrator: &Migrator) -> anyhow::Result<PgPool> {
        db::open(
            &self.url,
            self.migration_url.as_deref(),
            schema,
            self.max_connections,
            self.limits,
            migrator,
        )
        .await
    }
}

/// The development `DATABASE_URL` of the runtime role `role` (`member_app`, ...): the
/// local PostgreSQL's `paysaga` database, with the development password.
pub fn dev_database_url(role: &str) -> String {
    format!(
        "postgres://{role}:{}@127.0.0.1:5432/paysaga",
        db::DEV_ROLE_PASSWORD
    )
}

/// A service's database URLs, read among its secrets, before its pool settings.
#[derive(Debug)]
pub struct DatabaseUrls {
    url: String,
    migration_url: Option<String>,
}

impl DatabaseUrls {
    /// With `DB_MAX_CONNECTIONS`, `DB_STATEMENT_TIMEOUT_MS` and
    /// `DB_IDLE_IN_TRANSACTION_MS`.
    pub fn with_pool_from_env(self) -> Result<Database, ConfigError> {
        Ok(Database {
            url: self.url,
            migration_url: self.migration_url,
            max_connections: config::parse("DB_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS)?,
            limits: config::db_limits()?,
        })
    }
}

/// A service process as its binary and `paysaga service <name>` both run it: the
/// configuration from the environment, logging, one warning naming the development
/// values in use, the listening socket (handed over by a supervisor, else bound to
/// `LISTEN_ADDR`), the metrics listener (`METRICS_ADDR`, when set), then `run` until
/// SIGINT or SIGTERM.
pub async fn serve_from_env<C, Fut>(
    service: &'static str,
    from_env: impl FnOnce() -> Result<C, config::Error>,
    process: impl FnOnce(&C) -> &Process,
    run: impl FnOnce(C, TcpListener, Shutdown) -> Fut,
) -> anyhow::Result<()>
where
    Fut: Future<Output = anyhow::Result<()>>,
{
    let config = from_env()?;
    let settings = process(&config);
    telemetry::init_tracing_for(service, settings.log_format);
    settings.dev_fallbacks.warn(service);
    let mut handed = server::handed_over();
    let listener = server::listener(&mut handed, &settings.listen_addr).await?;
    if let Some(tls) = &settings.tls {
        tracing::info!(cert = ?tls.cert_file(), "serving TLS");
    }
    if let Some(addr) = &settings.metrics_addr {
        let metrics = server::metrics_listener(&mut handed, addr)
            .await
            .context("the METRICS_ADDR listener")?;
        tracing::info!(addr = %addr, "serving /metrics on its own listener");
        let tls = settings.tls.clone();
        // Lives as long as the process: it stops when `run` returns and the process exits.
        tokio::spawn(async move {
            let never = std::future::pending::<()>();
            let served = server::serve_tls(metrics, server::metrics_app(), never, tls.as_ref());
            if let Err(e) = served.await {
                tracing::error!(error = %e, "the metrics listener stopped");
            }
        });
    }
    run(config, listener, Box::pin(server::shutdown_signal())).await
}

/// A service crate's `serve_from_env`, the whole of its binary and of `paysaga service
/// <name>`: [`serve_from_env`] with the crate's `Config::from_env`, the `process`
/// settings in it and the crate's `run`.
#[macro_export]
macro_rules! serve_from_env_fn {
    ($service:literal) => {
        #[doc = concat!(
            "The ", $service, " process, as the `", $service, "` binary and `paysaga service ",
            $service, "` both run it ([`paysaga_common::service::serve_from_env`])."
        )]
        pub async fn serve_from_env() -> anyhow::Result<()> {
            $crate::service::serve_from_env($service, Config::from_env, |c| &c.process, run).await
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_development_database_url_carries_the_development_password() {
        let url = dev_database_url("member_app");
        assert_eq!(
            url,
            "postgres://member_app:paysaga-dev@127.0.0.1:5432/paysaga"
        );
        assert!(config::has_dev_password(&url));
        assert_eq!(
            Database::local(url).migration_url.as_deref(),
            Some("postgres://member_migrator:paysaga-dev@127.0.0.1:5432/paysaga")
        );
    }
}
