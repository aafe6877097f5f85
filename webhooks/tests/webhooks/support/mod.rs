//! Test harness: the schema that holds the webhook tables (the orchestrator's
//! `payment_service`), brought up from its migrations on a test database of its own.

use paysaga_common::testkit::TestDb;
use sqlx::{migrate::Migrator, PgPool};

/// The schema the webhook tables live in, and its migrations.
const SCHEMA: &str = "payment_service";
static MIGRATOR: Migrator = sqlx::migrate!("../migrations/payment_service");

/// A test database of its own with the payment schema brought up as the orchestrator
/// would, and a pool of `connections` on it as the orchestrator's own role: the webhook
/// tables, the payments whose trigger writes events, and nothing running. The database
/// goes with the returned [`TestDb`].
pub async fn payments_db(connections: u32) -> (TestDb, PgPool) {
    let db = TestDb::new().await;
    paysaga_common::db::migrate(&db.role_url("payment_migrator"), SCHEMA, &MIGRATOR)
        .await
        .expect("migrate");
    let pool = paysaga_common::db::connect(&db.role_url("payment_app"), SCHEMA, connections)
        .await
        .expect("connect");
    (db, pool)
}
