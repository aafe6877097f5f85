//! Test helpers: a fresh database per test (bootstrapped, dropped afterwards), a Redis
//! key prefix per test (deleted afterwards), and development tokens.

use std::time::Duration;

use sqlx::{
    postgres::PgConnectOptions, ConnectOptions, Connection, Executor, PgConnection, PgPool,
};
use std::str::FromStr;

use crate::{auth::Minter, db};

/// Administrator URL for tests: `TEST_ADMIN_DATABASE_URL`, or the local default.
pub fn admin_url() -> String {
    crate::config::string(
        "TEST_ADMIN_DATABASE_URL",
        "postgres://postgres:postgres@127.0.0.1:5432/postgres",
    )
}

/// Redis for tests: `TEST_REDIS_URL`, or the local default.
pub fn redis_url() -> String {
    crate::config::string("TEST_REDIS_URL", "redis://127.0.0.1:6379/")
}

/// A database of its own for one test, with roles and schemas bootstrapped. Dropped
/// (with its connections) when the value is dropped.
pub struct TestDb {
    pub name: String,
    admin: String,
}

impl TestDb {
    pub async fn new() -> Self {
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let admin = admin_url();
        db::create_database(&admin, &name)
            .await
            .expect("create test database");
        let this = Self { name, admin };
        db::bootstrap(&this.admin_url())
            .await
            .expect("bootstrap test database");
        this
    }

    /// Administrator URL for this test's database, for assertions across schemas.
    pub fn admin_url(&self) -> String {
        let base = self
            .admin
            .rsplit_once('/')
            .map(|(b, _)| b)
            .unwrap_or(&self.admin);
        format!("{base}/{}", self.name)
    }

    /// URL for a service role (`account_app`, `order_app`, `payment_app`).
    pub fn role_url(&self, role: &str) -> String {
        db::role_url(&self.admin_url(), role).expect("valid url")
    }

    /// A superuser pool on this database: read any schema to check invariants.
    pub async fn admin_pool(&self) -> PgPool {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect(&self.admin_url())
            .await
            .expect("connect as admin")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // Drop runs inside the test's runtime; do the async cleanup on a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async move {
                let opts = PgConnectOptions::from_str(&admin)
                    .ok()?
                    .database("postgres")
                    .disable_statement_logging();
                let mut conn = PgConnection::connect_with(&opts).await.ok()?;
                let sql = format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#);
                conn.execute(sql.as_str()).await.ok()?;
                conn.close().await.ok()
            })
        })
        .join();
    }
}

/// A Redis key prefix of its own for one test; its keys are deleted on drop.
pub struct TestRedis {
    pub url: String,
    pub prefix: String,
}

impl TestRedis {
    pub fn new() -> Self {
        Self {
            url: redis_url(),
            prefix: format!("t{}:", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        }
    }
}

impl Default for TestRedis {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        let url = self.url.clone();
        let pattern = format!("{}*", self.prefix);
        let _ = std::thread::spawn(move || -> Option<()> {
            let client = redis::Client::open(url).ok()?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async move {
                let mut conn = client.get_multiplexed_async_connection().await.ok()?;
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(&pattern)
                    .query_async(&mut conn)
                    .await
                    .ok()?;
                for chunk in keys.chunks(500) {
                    let _: () = redis::cmd("DEL")
                        .arg(chunk)
                        .query_async(&mut conn)
                        .await
                        .ok()?;
                }
                Some(())
            })
        })
        .join();
    }
}

/// A development buyer token for `member`, valid for an hour.
pub fn buyer_token(member: &str) -> String {
    Minter::dev_buyer().mint(member, Duration::from_secs(3600))
}

/// A development service credential for `service`, valid for an hour.
pub fn service_token(service: &str) -> String {
    Minter::dev_service().mint(service, Duration::from_secs(3600))
}
