//! The ledger is append-only even to the account service's own role: logged in as
//! `account_app`, nothing can delete a ledger row, rewrite its amount, account, kind or
//! key, move `status`, `merchant_shard` or `refunded` backwards, or change the schema;
//! and the table reads the same afterwards.

use crate::support::{amount, debit, key, Svc};
use paysaga_common::testkit::refused_all;
use paysaga_contracts::account::api::{Account, CreditRequest};
use sqlx::postgres::PgPoolOptions;

/// Everything in the ledger and the balances, as one digest (read as administrator).
async fn digest(svc: &Svc) -> String {
    sqlx::query_scalar(
        r#"
        SELECT md5(
            (SELECT string_agg(t::TEXT, '|' ORDER BY t.id) FROM account_service.transactions t)
            || (SELECT string_agg(a::TEXT, '|' ORDER BY a.id) FROM account_service.accounts a)
            || (SELECT string_agg(s::TEXT, '|' ORDER BY s.shard) FROM account_service.merchant_shards s)
        )
        "#,
    )
    .fetch_one(&svc.admin)
    .await
    .expect("digest")
}

/// Two members and a ledger with a debit, its partial refund and a declined debit.
async fn a_ledger_of_every_kind() -> (Svc, Account, Account) {
    let (svc, a, b) = Svc::with_two_members(1_000, 100).await;
    svc.pay("pay:1:debit", a.id, 400).await;
    svc.client
        .credit(&CreditRequest {
            operation_key: key("pay:1:refund"),
            account_id: a.id,
            amount: amount(150),
            refund_of: key("pay:1:debit"),
        })
        .await
        .expect("refunded");
    // Declined: b cannot cover it, so a DECLINED row exists too.
    let _ = svc.client.debit(&debit("pay:2:debit", b.id, 500)).await;
    (svc, a, b)
}

#[tokio::test]
async fn the_service_role_cannot_rewrite_or_delete_the_ledger() {
    let (svc, a, _) = a_ledger_of_every_kind().await;
    assert_eq!(svc.count_where("status = 'DECLINED'").await, 1);
    let before = digest(&svc).await;

    let app = PgPoolOptions::new()
        .max_connections(1)
        .connect(&svc.db.role_url("account_app"))
        .await
        .expect("connect as account_app");
    let refused_by_grants = [
        "DELETE FROM account_service.transactions",
        "TRUNCATE account_service.transactions",
        "UPDATE account_service.transactions SET amount = amount + 1",
        "UPDATE account_service.transactions SET account_id = account_id",
        "UPDATE account_service.transactions SET kind = 'DEPOSIT'",
        "UPDATE account_service.transactions SET operation_key = 'x' || operation_key",
        "DELETE FROM account_service.accounts",
        "TRUNCATE account_service.accounts CASCADE",
        "UPDATE account_service.accounts SET member_id = 'someone-else'",
        "UPDATE account_service.accounts SET kind = 'MERCHANT'",
        "DELETE FROM account_service.merchant_shards",
        "TRUNCATE account_service.merchant_shards CASCADE",
        "UPDATE account_service.merchant_shards SET shard = shard",
        // A hold is never deleted nor moved to another account.
        "DELETE FROM account_service.holds",
        "UPDATE account_service.holds SET account_id = account_id",
        "DROP TRIGGER transactions_guard ON account_service.transactions",
        "ALTER TABLE account_service.transactions DISABLE TRIGGER transactions_guard",
        "ALTER TABLE account_service.transactions DROP CONSTRAINT transactions_refund_within_debit",
        "CREATE TABLE account_service.shadow_ledger (id INT)",
        "DELETE FROM account_service._sqlx_migrations",
    ];
    refused_all(&app, &refused_by_grants, "42501").await;
    // An account's id is an identity column: no role renumbers it.
    refused_all(
        &app,
        &["UPDATE account_service.accounts SET id = -id"],
        "428C9",
    )
    .await;
    // The three columns the service may update only move forward.
    let refused_by_guard = [
        "UPDATE account_service.transactions SET refunded = 0 WHERE refunded > 0",
        "UPDATE account_service.transactions SET status = 'APPLIED' WHERE status = 'DECLINED'",
        "UPDATE account_service.transactions SET merchant_shard = (merchant_shard + 1) % 16 \
         WHERE kind = 'DEBIT' AND status = 'APPLIED'",
    ];
    refused_all(&app, &refused_by_guard, "23000").await;
    app.close().await;

    assert_eq!(digest(&svc).await, before, "the ledger reads as it did");
    // The service itself still works with exactly these rights.
    svc.pay("pay:3:debit", a.id, 100).await;
    assert_eq!(svc.balance(a.id).await, 1_000 - 400 + 150 - 100);
}

#[tokio::test]
async fn the_database_refuses_a_balance_moved_without_its_ledger_row() {
    let (svc, _, b) = a_ledger_of_every_kind().await;
    let before = digest(&svc).await;
    let app = paysaga_common::db::connect(&svc.db.role_url("account_app"), "account_service", 1)
        .await
        .expect("connect as account_app");

    // Balances and their totals move with the ledger rows alone, never by hand.
    let by_hand = [
        format!(
            "UPDATE accounts SET balance = balance + 1 WHERE id = {}",
            b.id
        ),
        "UPDATE merchant_shards SET balance = balance + 1 WHERE shard = 0".to_owned(),
        "UPDATE accounts SET ledger_total = ledger_total + 1".to_owned(),
        "UPDATE merchant_shards SET ledger_total = 0".to_owned(),
        "ALTER TABLE transactions DISABLE TRIGGER ledger_moves_balances_after_insert".to_owned(),
    ];
    let by_hand: Vec<&str> = by_hand.iter().map(String::as_str).collect();
    refused_all(&app, &by_hand, "42501").await;
    // An account opens empty, whatever its insert says: the balance is not its ledger's.
    refused_all(
        &app,
        &[
            "INSERT INTO accounts (member_id, kind, balance) VALUES ('forger', 'MEMBER', 500)",
            "INSERT INTO accounts (member_id, kind, balance, ledger_total) \
             VALUES ('forger', 'MEMBER', 500, 500)",
        ],
        "23000",
    )
    .await;
    assert_eq!(digest(&svc).await, before, "nothing was written");

    // A row moves its account's balance by itself, in the statement that writes it.
    sqlx::query(
        "INSERT INTO transactions (id, operation_key, kind, status, account_id, amount, requested_by) \
         VALUES (gen_random_uuid(), 'by-hand', 'DEPOSIT', 'APPLIED', $1, 5, 'admin@example.com')",
    )
    .bind(b.id)
    .execute(&app)
    .await
    .expect("row");
    assert_eq!(svc.balance(b.id).await, 100 + 5);
    let (balance, total): (i64, i64) =
        sqlx::query_as("SELECT balance, ledger_total FROM account_service.accounts WHERE id = $1")
            .bind(b.id)
            .fetch_one(&svc.admin)
            .await
            .expect("account");
    assert_eq!((balance, total), (105, 105));
}

#[tokio::test]
async fn the_reconciliation_finds_a_balance_changed_without_its_ledger_row() {
    let (svc, _, b) = a_ledger_of_every_kind().await;
    // As the service reads it: its own role, its own schema.
    let app = paysaga_common::db::connect(&svc.db.role_url("account_app"), "account_service", 1)
        .await
        .expect("connect as account_app");
    assert_eq!(
        account::reconcile::run_once(&app)
            .await
            .expect("reconciled"),
        0,
        "every balance is its rows' sum"
    );

    // The service cannot move a balance alone (the test above); an administrator with
    // the triggers off can, and the reconciliation finds it.
    let mut admin = svc.admin.acquire().await.expect("admin connection");
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut *admin)
        .await
        .expect("triggers off");
    sqlx::query("UPDATE account_service.accounts SET balance = balance + 1 WHERE id = $1")
        .bind(b.id)
        .execute(&mut *admin)
        .await
        .expect("balance moved");
    sqlx::query("RESET session_replication_role")
        .execute(&mut *admin)
        .await
        .expect("triggers on");
    drop(admin);
    assert_eq!(
        account::reconcile::run_once(&app)
            .await
            .expect("reconciled"),
        1
    );
}
