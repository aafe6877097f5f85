//! The database a run creates for itself (roles and schemas bootstrapped as for the
//! services) and drops at the end, even when the run fails.

use std::str::FromStr;

use paysaga_common::db;
use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions},
    ConnectOptions, Connection, Executor, PgConnection, PgPool,
};

use crate::error::Result;

pub struct BenchDb {
    pub name: String,
    admin: String,
    dropped: bool,
}

impl BenchDb {
    /// Creates `paysaga_bench_<random>` and bootstraps the service roles and schemas.
    pub async fn create(admin_url: &str) -> Result<Self> {
        let name = format!(
            "paysaga_bench_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        db::create_database(admin_url, &name).await?;
        let this = Self {
            name,
            admin: admin_url.to_owned(),
            dropped: false,
        };
        db::bootstrap(&this.url(), db::RolePasswords::Development).await?;
        Ok(this)
    }

    /// Administrator URL of this database.
    pub fn url(&self) -> String {
        let base = self
            .admin
            .rsplit_once('/')
            .map_or(self.admin.as_str(), |(b, _)| b);
        format!("{base}/{}", self.name)
    }

    /// URL of a service role on this database.
    pub fn role_url(&self, role: &str) -> Result<String> {
        Ok(db::role_url(&self.url(), role)?)
    }

    /// A superuser pool on this database (reads every schema, for the invariant checks).
    pub async fn admin_pool(&self, max_connections: u32) -> Result<PgPool> {
        let options = PgConnectOptions::from_str(&self.url())?
            .application_name("paysaga-bench")
            .disable_statement_logging();
        Ok(PgPoolOptions::new()
            .max_connections(max_connections)
            .connect_with(options)
            .await?)
    }

    /// Drops the database and any connection still open on it.
    pub async fn drop_now(mut self) -> Result<()> {
        self.dropped = true;
        drop_database(&self.admin, &self.name).await
    }
}

async fn drop_database(admin: &str, name: &str) -> Result<()> {
    let options = PgConnectOptions::from_str(admin)?
        .database("postgres")
        .disable_statement_logging();
    let mut conn = PgConnection::connect_with(&options).await?;
    let sql = format!(
        r#"DROP DATABASE IF EXISTS "{}" WITH (FORCE)"#,
        name.replace('"', "\"\"")
    );
    conn.execute(sql.as_str()).await?;
    conn.close().await?;
    Ok(())
}

impl Drop for BenchDb {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Drop may run inside the runtime (an error or Ctrl-C unwound the run): clean up
        // on a thread of its own with a runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(drop_database(&admin, &name)).ok()
        })
        .join();
    }
}
