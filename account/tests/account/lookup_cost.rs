//! The account lookup the orchestrator makes for every payment must cost the same with
//! 10 debits in the ledger or 10,000: a drop funds its buyers (rows without a key) and
//! then debits them in a burst, and statistics taken in between once led the planner to
//! scan every keyed transaction per lookup.

use crate::support::{debit, Svc};
use account::accounts::{MEMBER_RECENT_SQL, RECENT_TRANSACTIONS};
use futures::future::join_all;

/// Buyers funded for the drop, and how many of them pay before the lookup is planned.
const FUNDED: i32 = 10_000;
const DEBITED: usize = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_members_recent_transactions_are_read_through_its_own_index() {
    let svc = Svc::start().await;
    // A drop's buyers, funded in bulk (setup, written directly): opening transactions
    // carry no operation key.
    let ids: Vec<i64> = sqlx::query_scalar(
        r#"
        WITH opened AS (
            INSERT INTO account_service.accounts (member_id, kind, balance)
            SELECT 'lookup-' || g, 'MEMBER', 0 FROM generate_series(1, $1) AS g
            RETURNING id
        ), funded AS (
            INSERT INTO account_service.transactions (id, kind, status, account_id, amount)
            SELECT gen_random_uuid(), 'OPENING', 'APPLIED', id, 1000 FROM opened
        )
        SELECT id FROM opened ORDER BY id
        "#,
    )
    .bind(FUNDED)
    .fetch_all(&svc.admin)
    .await
    .expect("fund buyers");
    let accounts = &ids[..DEBITED];

    // The statistics a drop would have right after funding: no transaction has a key.
    sqlx::query("ANALYZE account_service.transactions")
        .execute(&svc.admin)
        .await
        .expect("analyze");

    for chunk in accounts.chunks(50) {
        let client = &svc.client;
        let paid = join_all(chunk.iter().map(|&id| async move {
            let req = debit(&format!("pay:{id}:debit"), id, 10);
            client.debit(&req).await
        }))
        .await;
        assert!(paid.iter().all(|r| matches!(r, Ok(a) if a.status == 201)));
    }
    assert_eq!(svc.count_where("kind = 'DEBIT'").await, DEBITED as i64);

    // The plan PostgreSQL runs for the lookup, with these statistics, as the service's
    // own prepared statement would be planned.
    let target = accounts[DEBITED / 2];
    let mut conn = svc.admin.acquire().await.expect("connection");
    sqlx::query("SET search_path = account_service")
        .execute(&mut *conn)
        .await
        .expect("search path");
    let plan: serde_json::Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {MEMBER_RECENT_SQL}"
    ))
    .bind(target)
    .bind(RECENT_TRANSACTIONS)
    .fetch_one(&mut *conn)
    .await
    .expect("explain");
    let root = &plan[0]["Plan"];
    let text = plan.to_string();
    assert!(
        text.contains("transactions_account_keyed_recent"),
        "lookup does not use its index: {plan:#}"
    );
    assert_eq!(root["Actual Rows"], 1, "the account's one debit: {plan:#}");
    let blocks = root["Shared Hit Blocks"].as_i64().unwrap_or(0)
        + root["Shared Read Blocks"].as_i64().unwrap_or(0);
    assert!(
        blocks <= 10,
        "{blocks} buffers for one account's history among {DEBITED} debits: {plan:#}"
    );

    // And the service answers it with that debit.
    let view = svc.client.get_account(target).await.expect("account").body;
    let keys: Vec<_> = view
        .recent_transactions
        .iter()
        .map(|t| t.operation_key.as_str())
        .collect();
    assert_eq!(keys, [format!("pay:{target}:debit")]);
}
