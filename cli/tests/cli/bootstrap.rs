//! `paysaga bootstrap` on a PostgreSQL cluster of its own: the roles it creates have no
//! password (none known to anyone) unless the development one is asked for, and a run
//! over roles that exist leaves them as they are.

use std::process::Command;

use paysaga_common::db::{MIGRATORS, ROLES};
use paysaga_e2e::binaries;
use paysaga_supervisor::{Infra, InfraChoice};
use sqlx::Connection;

/// `paysaga bootstrap` with `extra` arguments against the cluster `admin_url` names.
fn bootstrap(admin_url: &str, extra: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_paysaga"))
        .args(["bootstrap", "--database", "paysaga_bootstrap"])
        .args(extra)
        .env("ADMIN_DATABASE_URL", admin_url)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "bootstrap failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_creates_roles_with_no_known_password() -> anyhow::Result<()> {
    let data = binaries::log_dir("bootstrap")?;
    let infra = Infra::acquire(
        &data,
        InfraChoice {
            force_private: true,
        },
    )
    .await?;
    // Roles are cluster-wide: read them through the maintenance database.
    let mut maintenance = reqwest::Url::parse(&infra.admin_url)?;
    maintenance.set_path("/postgres");
    let maintenance = maintenance.to_string();
    let roles: Vec<String> = ROLES
        .iter()
        .chain(&MIGRATORS)
        .map(|(role, _)| role.to_string())
        .collect();
    let passwords = |admin: String, roles: Vec<String>| async move {
        let mut conn = sqlx::PgConnection::connect(&admin).await?;
        let rows: Vec<(String, bool)> = sqlx::query_as(
            r#"SELECT rolname::TEXT, rolpassword IS NOT NULL FROM pg_authid WHERE rolname = ANY($1) ORDER BY rolname"#,
        )
        .bind(&roles)
        .fetch_all(&mut conn)
        .await?;
        conn.close().await?;
        anyhow::Ok(rows)
    };

    let said = bootstrap(&infra.admin_url, &[])?;
    assert!(said.contains("no password"), "{said}");
    let after = passwords(maintenance.clone(), roles.clone()).await?;
    assert_eq!(after.len(), roles.len(), "every role exists: {after:?}");
    assert!(
        after.iter().all(|(_, has)| !has),
        "no role has a password: {after:?}"
    );

    // The development password is only ever given to roles created by that run.
    bootstrap(&infra.admin_url, &["--dev-passwords"])?;
    assert_eq!(
        passwords(maintenance.clone(), roles.clone()).await?,
        after,
        "roles that exist are left as they are"
    );
    Ok(())
}
