//! The drop invariant check reads the order service's own tables and flags what it must:
//! an oversold product and a mismatch between what buyers saw and what was confirmed.

use paysaga_bench::{
    cli::{Cli, Settings},
    invariants,
    machine::Machine,
    report::Report,
};
use paysaga_common::{db, testkit::TestDb};

fn report() -> Report {
    let args = <Cli as clap::Parser>::parse_from(["paysaga-bench"]).run;
    Report::new(Settings::from_args(&args).unwrap(), Machine::detect())
}

/// A product with `units` unit rows, the first `sold` of them SOLD through confirmed
/// reservations, written as the order service's role into its migrated schema.
async fn product(db: &TestDb, units: i64, sold: i64) -> i64 {
    db::migrate(
        &db.role_url("order_migrator"),
        order::SCHEMA,
        &order::MIGRATOR,
    )
    .await
    .unwrap();
    let pool = db::connect(&db.role_url("order_app"), order::SCHEMA, 2)
        .await
        .unwrap();
    let id: i64 =
        sqlx::query_scalar(r#"INSERT INTO products (name, price) VALUES ('p', 1000) RETURNING id"#)
            .fetch_one(&pool)
            .await
            .unwrap();
    sqlx::query(r#"INSERT INTO product_stock (product_id, state) SELECT $1, CASE WHEN g <= $3 THEN 'SOLD' ELSE 'AVAILABLE' END FROM generate_series(1, $2) AS g"#)
        .bind(id)
        .bind(units)
        .bind(sold)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        r#"INSERT INTO reservations (id, product_id, unit_id, member_id, pass_id, price, state, expires_at, order_id)
           SELECT gen_random_uuid(), $1, s.id, 'm' || s.id, gen_random_uuid(), 1000, 'CONFIRMED', now(), gen_random_uuid()
           FROM product_stock s WHERE s.product_id = $1 AND s.state = 'SOLD'"#,
    )
    .bind(id)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    id
}

/// The drop check's report on a product of `units` units, `sold` of them sold, for a
/// drop of `drop_units` whose buyers were told COMPLETED `completed` times.
async fn checked(units: i64, sold: i64, drop_units: u64, completed: u64) -> Report {
    let db = TestDb::new().await;
    let p = product(&db, units, sold).await;
    let mut r = report();
    invariants::check_drop(
        &mut r,
        "t",
        &db.admin_pool().await,
        p,
        drop_units,
        completed,
    )
    .await
    .unwrap();
    r
}

fn held(r: &Report, check: &str) -> bool {
    r.invariants
        .iter()
        .find(|i| i.check == check)
        .map(|i| i.ok)
        .unwrap()
}

#[tokio::test]
async fn a_consistent_drop_passes() {
    let r = checked(10, 10, 10, 10).await;
    assert!(r.all_invariants_hold(), "{:#?}", r.invariants);
}

#[tokio::test]
async fn more_units_sold_than_the_drop_had_is_flagged() {
    // The drop was for 10 units; 12 were sold (stock grew behind its back).
    let r = checked(12, 12, 10, 12).await;
    assert!(!held(&r, "oversold = 0"));
}

#[tokio::test]
async fn buyers_seeing_more_completions_than_orders_is_flagged() {
    let r = checked(10, 7, 10, 8).await;
    assert!(held(&r, "oversold = 0"));
    assert!(!held(&r, "COMPLETED seen by buyers = orders confirmed"));
}
