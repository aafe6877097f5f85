//! The schema wall: every service role, runtime and migrator, reaches its own schema
//! and no other, checked for every ordered pair (reading, writing and creating in the
//! other's schema); and no runtime role can change even its own schema.

use paysaga_common::{
    db::{MIGRATORS, ROLES},
    testkit::{sqlstate, TestDb},
};
use sqlx::{postgres::PgPoolOptions, PgPool};

async fn pool_as(db: &TestDb, role: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.role_url(role))
        .await
        .unwrap_or_else(|e| panic!("connect as {role}: {e}"))
}

#[tokio::test]
async fn every_role_is_walled_off_from_every_other_schema_in_both_directions() {
    let db = TestDb::new().await;
    let admin = db.admin_pool().await;
    for (_, schema) in ROLES {
        sqlx::query(&format!("CREATE TABLE {schema}.wall_probe (id INT)"))
            .execute(&admin)
            .await
            .expect("probe table");
        sqlx::query(&format!("INSERT INTO {schema}.wall_probe VALUES (1)"))
            .execute(&admin)
            .await
            .expect("probe row");
    }

    let mut refused = 0;
    for (role, own) in MIGRATORS.into_iter().chain(ROLES) {
        let pool = pool_as(&db, role).await;
        // Its own schema is reachable, so each refusal below is the wall, not a broken
        // login: the migrator creates there (migrators come first), the runtime role
        // reads what its migrator granted it.
        if role.ends_with("_migrator") {
            let app = ROLES
                .iter()
                .find(|(_, s)| *s == own)
                .map(|(r, _)| *r)
                .unwrap();
            for sql in [
                format!("CREATE TABLE {own}.own_probe (id INT)"),
                format!("GRANT SELECT ON {own}.own_probe TO {app}"),
            ] {
                sqlx::query(&sql)
                    .execute(&pool)
                    .await
                    .unwrap_or_else(|e| panic!("{role}: {sql}: {e}"));
            }
        } else {
            sqlx::query(&format!("SELECT id FROM {own}.own_probe"))
                .execute(&pool)
                .await
                .unwrap_or_else(|e| panic!("{role} reads in {own}: {e}"));
            let err = sqlx::query(&format!("CREATE TABLE {own}.own_change (id INT)"))
                .execute(&pool)
                .await
                .expect_err(&format!("{role} must not change its own schema"));
            assert_eq!(sqlstate(&err).as_deref(), Some("42501"), "{role}: {err}");
            refused += 1;
        }
        for (_, other) in ROLES {
            if other == own {
                continue;
            }
            for sql in [
                format!("SELECT id FROM {other}.wall_probe"),
                format!("INSERT INTO {other}.wall_probe VALUES (2)"),
                format!("CREATE TABLE {other}.intruder (id INT)"),
            ] {
                let err = sqlx::query(&sql)
                    .execute(&pool)
                    .await
                    .expect_err(&format!("{role}: {sql} must be refused"));
                assert_eq!(
                    sqlstate(&err).as_deref(),
                    Some("42501"),
                    "{role}: {sql}: {err}"
                );
                refused += 1;
            }
        }
        pool.close().await;
    }
    let roles = ROLES.len() + MIGRATORS.len();
    assert_eq!(refused, roles * (ROLES.len() - 1) * 3 + ROLES.len());

    // Nothing got through: every probe still holds its one row and no intruder exists.
    for (_, schema) in ROLES {
        let rows: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {schema}.wall_probe"))
            .fetch_one(&admin)
            .await
            .unwrap();
        assert_eq!(rows, 1, "{schema}");
    }
    let intruders: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_tables WHERE tablename IN ('intruder', 'own_change')",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(intruders, 0);
    admin.close().await;
}
