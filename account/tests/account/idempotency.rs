//! One operation key, one outcome: concurrent duplicates, reuse with a different
//! request, and a declined key that stays declined after money arrives.

use crate::support::{amount, debit, key, Svc};
use futures::future::join_all;
use paysaga_contracts::account::api::{CreditRequest, TransactionStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_identical_debits_take_money_once() {
    let svc = Svc::start().await;
    let acct = svc.open("member-1", 10_000).await;
    let total_before = svc.total_money().await;

    let req = debit("pay:same:debit", acct.id, 1_250);
    let answers = join_all((0..50).map(|_| svc.client.debit(&req))).await;

    let mut created = 0;
    let mut ids = std::collections::HashSet::new();
    for a in answers {
        let a = a.expect("every duplicate gets a definite success");
        assert!(a.status == 201 || a.status == 200, "status {}", a.status);
        if a.status == 201 {
            created += 1;
        }
        assert_eq!(a.body.amount, 1_250);
        assert_eq!(a.body.status, TransactionStatus::Applied);
        ids.insert(a.body.id);
    }
    assert_eq!(created, 1, "exactly one answer created the transaction");
    assert_eq!(ids.len(), 1, "all 50 answers describe the same transaction");

    assert_eq!(svc.count_where("operation_key = 'pay:same:debit'").await, 1);
    let stored_id: uuid::Uuid = sqlx::query_scalar(
        "SELECT id FROM account_service.transactions WHERE operation_key = 'pay:same:debit'",
    )
    .fetch_one(&svc.admin)
    .await
    .expect("row");
    assert!(ids.contains(&stored_id));
    assert_eq!(
        svc.balance(acct.id).await,
        10_000 - 1_250,
        "balance reduced once"
    );
    assert_eq!(svc.merchant_balance().await, 1_250);
    assert_eq!(svc.total_money().await, total_before);
}

#[tokio::test]
async fn same_key_with_a_different_request_is_refused_without_effect() {
    let (svc, a, b) = Svc::with_two_members(10_000, 10_000).await;

    let first = svc.pay("k1", a.id, 500).await;
    assert_eq!(first.status, 201);

    for (req, what) in [
        (debit("k1", a.id, 501), "amount"),
        (debit("k1", b.id, 500), "account"),
    ] {
        let err = svc
            .client
            .debit(&req)
            .await
            .expect_err("different request on a used key");
        assert_eq!(err.status(), Some(409), "different {what}");
        assert_eq!(err.code(), Some("OPERATION_KEY_REUSED"));
    }
    // The key of a debit cannot be reused as a credit either.
    let credit = CreditRequest {
        operation_key: key("k1"),
        account_id: a.id,
        amount: amount(500),
        refund_of: key("k1"),
    };
    let err = svc
        .client
        .credit(&credit)
        .await
        .expect_err("credit on a debit's key");
    assert_eq!(err.code(), Some("OPERATION_KEY_REUSED"));

    assert_eq!(svc.count_where("operation_key = 'k1'").await, 1);
    assert_eq!(svc.balance(a.id).await, 9_500);
    assert_eq!(svc.balance(b.id).await, 10_000);
    assert_eq!(svc.merchant_balance().await, 500);
    let refunded = svc
        .number("SELECT refunded FROM account_service.transactions WHERE operation_key = 'k1'")
        .await;
    assert_eq!(refunded, 0);
}

#[tokio::test]
async fn a_declined_key_stays_declined_after_the_account_is_topped_up() {
    let (svc, a) = Svc::with_member(100).await;

    let paid = svc.pay("pay:1:debit", a.id, 100).await;
    assert_eq!(paid.status, 201);
    let declined = svc.refused("pay:2:debit", a.id, 60).await;
    assert_eq!(declined.status(), Some(422));
    assert_eq!(declined.code(), Some("INSUFFICIENT_FUNDS"));

    // The decline is on record under its key.
    let looked_up = svc
        .client
        .transaction_by_key("pay:2:debit")
        .await
        .expect("decline recorded");
    assert_eq!(looked_up.body.status, TransactionStatus::Declined);

    // Money comes back (a refund of the first payment), then the declined request is replayed.
    let refund = CreditRequest {
        operation_key: key("pay:1:refund"),
        account_id: a.id,
        amount: amount(100),
        refund_of: key("pay:1:debit"),
    };
    assert_eq!(
        svc.client.credit(&refund).await.expect("refunded").status,
        201
    );
    assert_eq!(svc.balance(a.id).await, 100);

    let again = svc.refused("pay:2:debit", a.id, 60).await;
    assert_eq!(again.code(), Some("INSUFFICIENT_FUNDS"));
    assert_eq!(
        svc.balance(a.id).await,
        100,
        "the late duplicate moved no money"
    );
    assert_eq!(
        svc.count_where("operation_key = 'pay:2:debit' AND status = 'DECLINED'")
            .await,
        1
    );
    assert_eq!(svc.count_where("operation_key = 'pay:2:debit'").await, 1);
    assert_eq!(svc.merchant_balance().await, 0);
}

#[tokio::test]
async fn lookup_by_key_tells_what_happened() {
    let (svc, a) = Svc::with_member(1_000).await;

    // A key never used, and a malformed one.
    for (k, status, code) in [
        ("pay:never:debit", 404, "TRANSACTION_NOT_FOUND"),
        ("has space", 400, "INVALID_OPERATION_KEY"),
    ] {
        let e = svc.client.transaction_by_key(k).await.expect_err(k);
        assert_eq!((e.status(), e.code()), (Some(status), Some(code)), "{k}");
    }

    let applied = svc.pay("pay:x:debit", a.id, 300).await.body;
    let found = svc
        .client
        .transaction_by_key("pay:x:debit")
        .await
        .expect("found")
        .body;
    assert_eq!(found, applied);
}
