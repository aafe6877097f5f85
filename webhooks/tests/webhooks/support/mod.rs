//! Test harness: the schema that holds the webhook tables (the orchestrator's
//! `payment_service`), brought up from its migrations on a test database of its own.

use paysaga_common::testkit::TestDb;
use sqlx::{migrate::Migrator, PgPool};

/// The schema the webhook tables live in, and its migrations.
const SCHEMA: &str = "payment_service";
static MIGRATOR: Migrator = sqlx::migrate!("../migrations/payment_service");

/// The payment schema brought up as the orchestrator would, and a pool of
/// `connections` as the orchestrator's own role: the webhook tables, the payments whose
/// trigger writes events, and nothing running.
pub async fn payments_pool(db: &TestDb, connections: u32) -> PgPool {
    paysaga_common::db::migrate(&db.role_url("payment_migrator"), SCHEMA, &MIGRATOR)
        .await
        .expect("migrate");
    paysaga_common::db::connect(&db.role_url("payment_app"), SCHEMA, connections)
        .await
        .expect("connect")
}
