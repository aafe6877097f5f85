//! Keyed openings (one account per key, however often it is sent) and deposits (money
//! paid in from outside under an operation key), checked in the tables.

use crate::support::Svc;
use paysaga_common::auth::MemberId;
use paysaga_contracts::account::api::{OpenAccountRequest, OperationKey, TransactionKind};

fn keyed_opening(member: &str, balance: i64, key: &str) -> OpenAccountRequest {
    OpenAccountRequest {
        member_id: MemberId::parse(member).unwrap(),
        opening_balance: balance,
        open_key: Some(OperationKey::parse(key).unwrap()),
    }
}

const M1_ACCOUNTS: &str = "SELECT COUNT(*) FROM account_service.accounts WHERE member_id = 'm-1'";

#[tokio::test]
async fn a_keyed_opening_opens_one_account_however_often_and_concurrently_it_is_sent() {
    let svc = Svc::start().await;
    let req = keyed_opening("m-1", 500, "member:m-1:account");
    let sends = (0..8).map(|_| svc.operator.open_account(&req));
    let answers = futures::future::join_all(sends).await;
    let mut created = 0;
    let mut ids = std::collections::BTreeSet::new();
    for a in answers {
        let a = a.expect("answered");
        assert!(matches!(a.status, 200 | 201), "{}", a.status);
        created += usize::from(a.status == 201);
        ids.insert(a.body.id);
    }
    assert_eq!(created, 1, "exactly one send opened it");
    assert_eq!(ids.len(), 1, "every send answered the same account");

    let accounts = svc.number(M1_ACCOUNTS).await;
    assert_eq!(accounts, 1);
    assert_eq!(
        svc.count_where("kind = 'OPENING'").await,
        1,
        "one opening deposit"
    );
    assert_eq!(svc.total_money().await, 500);

    // The key with another member or another deposit is a different request.
    for other in [
        keyed_opening("m-2", 500, "member:m-1:account"),
        keyed_opening("m-1", 900, "member:m-1:account"),
    ] {
        let err = svc
            .operator
            .open_account(&other)
            .await
            .expect_err("refused");
        assert_eq!(err.status(), Some(409));
        assert_eq!(err.code(), Some("OPERATION_KEY_REUSED"));
    }
    // Unkeyed openings are not affected: each opens an account.
    svc.open("m-1", 0).await;
    let accounts = svc.number(M1_ACCOUNTS).await;
    assert_eq!(accounts, 2);
}

#[tokio::test]
async fn a_deposit_pays_in_once_per_key_and_the_ledger_explains_every_balance() {
    let svc = Svc::start().await;
    let account = svc.open("m-1", 100).await;
    let req = svc.deposit("topup:m-1:1", "m-1", account.id, 2_500);
    let first = svc.member.deposit(&req).await.expect("deposited");
    assert_eq!(first.status, 201);
    assert_eq!(first.body.kind, TransactionKind::Deposit);
    let again = svc.member.deposit(&req).await.expect("replayed");
    assert_eq!(again.status, 200);
    assert_eq!(again.body.id, first.body.id);

    let other = svc.deposit("topup:m-1:1", "m-1", account.id, 9);
    let err = svc.member.deposit(&other).await.expect_err("reuse");
    assert_eq!(err.code(), Some("OPERATION_KEY_REUSED"));

    assert_eq!(svc.balance(account.id).await, 2_600);
    assert_eq!(svc.count_where("kind = 'DEPOSIT'").await, 1);
    assert_eq!(
        svc.merchant_balance().await,
        0,
        "a deposit never touches the merchant"
    );
    let explained = svc
        .number(
            "SELECT COALESCE(SUM(amount), 0)::BIGINT FROM account_service.transactions
             WHERE kind IN ('OPENING', 'DEPOSIT') AND status = 'APPLIED'",
        )
        .await;
    assert_eq!(explained, svc.total_money().await);

    // The merchant account cannot be topped up, and a missing account is 404.
    let merchant = svc.merchant_id().await;
    let merchant_member: String =
        sqlx::query_scalar(r#"SELECT member_id FROM account_service.accounts WHERE id = $1"#)
            .bind(merchant)
            .fetch_one(&svc.admin)
            .await
            .expect("the merchant's row");
    for (account_id, member, code) in [
        (merchant, merchant_member.as_str(), "ACCOUNT_NOT_MEMBER"),
        (987_654, "m-1", "ACCOUNT_NOT_FOUND"),
    ] {
        let r = svc.deposit(&format!("topup:x:{account_id}"), member, account_id, 1);
        let err = svc.member.deposit(&r).await.expect_err("refused");
        assert_eq!(err.code(), Some(code));
    }
    assert_eq!(
        svc.count_where("kind = 'DEPOSIT'").await,
        1,
        "refusals wrote nothing"
    );
}
