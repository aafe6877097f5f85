//! A deposit is carried out only with the orchestrator's signed authorization naming it:
//! anything else is 403 `DEPOSIT_NOT_APPROVED` with nothing written, and the ledger row
//! of an authorized one names who asked and who approved.

use crate::support::{constraint, Svc};
use paysaga_common::auth::MemberId;
use paysaga_common::{
    auth::ServiceRole,
    deposits::{DepositGrant, DepositSigner},
    keys::DevKey,
};
use paysaga_contracts::account::api::{DepositRequest, OpenAccountRequest};

fn grant(member: &str, minor: i64, key: &str) -> DepositGrant {
    DepositGrant {
        member_id: member.to_owned(),
        amount: minor,
        operation_key: key.to_owned(),
        requested_by: "alice@example.com".to_owned(),
        approved_by: Some("bob@example.com".to_owned()),
    }
}

/// The ledger's deposit rows: (count, sum).
async fn deposits(svc: &Svc) -> (i64, i64) {
    sqlx::query_as(
        r#"SELECT COUNT(*), COALESCE(SUM(amount), 0)::BIGINT
           FROM account_service.transactions WHERE kind = 'DEPOSIT'"#,
    )
    .fetch_one(&svc.admin)
    .await
    .expect("deposits")
}

#[tokio::test]
async fn a_deposit_without_a_valid_authorization_naming_it_is_refused_and_writes_nothing() {
    let (svc, account) = Svc::with_member(100).await;
    let key = "topup:auth:1";
    let signed = |g: &DepositGrant| DepositSigner::development().sign(g);
    let now = chrono::Utc::now().timestamp();
    let gate = DepositSigner::new(&DevKey::Service(ServiceRole::Gate).signing_key());
    let cases: Vec<(&str, Option<String>)> = vec![
        ("unsigned", None),
        ("not a token", Some("not-a-token".to_owned())),
        (
            "signed with the gate's key",
            Some(gate.sign(&grant("member-1", 700, key))),
        ),
        (
            "expired",
            Some(DepositSigner::development().sign_at(&grant("member-1", 700, key), now - 300, 60)),
        ),
        (
            "living too long",
            Some(DepositSigner::development().sign_at(&grant("member-1", 700, key), now, 3600)),
        ),
        ("another member", Some(signed(&grant("member-2", 700, key)))),
        (
            "another amount",
            Some(signed(&grant("member-1", 7_000, key))),
        ),
        (
            "another key",
            Some(signed(&grant("member-1", 700, "topup:auth:other"))),
        ),
    ];
    let mut req: DepositRequest = svc.deposit(key, "member-1", account.id, 700);
    for (what, authorization) in cases {
        req.authorization = authorization;
        let e = svc.member.deposit(&req).await.expect_err(what);
        assert_eq!(e.status(), Some(403), "{what}");
        assert_eq!(e.code(), Some("DEPOSIT_NOT_APPROVED"), "{what}");
    }
    // A valid authorization from a caller other than the member service: the route
    // admits the member service only.
    let valid = svc.deposit(key, "member-1", account.id, 700);
    for client in [&svc.operator, &svc.client] {
        let e = client
            .deposit(&valid)
            .await
            .expect_err("not the member service");
        assert_eq!(e.status(), Some(403));
        assert_eq!(e.code(), Some("FORBIDDEN_CALLER"));
    }
    assert_eq!(deposits(&svc).await, (0, 0), "no refusal wrote a row");
    assert_eq!(svc.balance(account.id).await, 100);

    // The valid one applies, and its row names the people.
    let mut approved = valid.clone();
    approved.authorization = Some(signed(&grant("member-1", 700, key)));
    let done = svc.member.deposit(&approved).await.expect("deposited");
    assert_eq!(done.status, 201);
    let people: (Option<String>, Option<String>) = sqlx::query_as(
        r#"SELECT requested_by, approved_by FROM account_service.transactions
           WHERE operation_key = $1"#,
    )
    .bind(key)
    .fetch_one(&svc.admin)
    .await
    .expect("the row");
    assert_eq!(
        people,
        (
            Some("alice@example.com".to_owned()),
            Some("bob@example.com".to_owned())
        )
    );
    assert_eq!(deposits(&svc).await, (1, 700));
    assert_eq!(svc.balance(account.id).await, 800);
}

#[tokio::test]
async fn only_deposits_name_people_and_new_deposits_must() {
    let (svc, account) = Svc::with_member(100).await;
    let app = sqlx::PgPool::connect(&svc.db.role_url("account_app"))
        .await
        .expect("account_app");
    for (kind, requested_by, refused_by) in [
        ("DEPOSIT", None, "transactions_deposit_requested_by"),
        (
            "OPENING",
            Some("alice@example.com"),
            "transactions_people_on_deposits_only",
        ),
    ] {
        let e = sqlx::query(
            r#"INSERT INTO account_service.transactions
                   (id, operation_key, kind, status, account_id, amount, requested_by)
               VALUES ($1, CASE WHEN $2 = 'OPENING' THEN NULL ELSE 'topup:raw' END, $2,
                       'APPLIED', $3, 1, $4)"#,
        )
        .bind(uuid::Uuid::now_v7())
        .bind(kind)
        .bind(account.id)
        .bind(requested_by)
        .execute(&app)
        .await
        .expect_err("refused");
        assert_eq!(constraint(&e), Some(refused_by), "{kind}");
    }
}

/// Outside development mode no account opens with money, from any caller (money enters
/// only by an authorized deposit), and the operator tools release no hold; both refused
/// before anything is written.
#[tokio::test]
async fn outside_development_accounts_open_empty_and_the_tools_release_no_hold() {
    let svc = Svc::start_with(|c| c.openings_with_money = false).await;
    let opening = |member: &str, balance: i64| OpenAccountRequest {
        member_id: MemberId::parse(member).expect("member id"),
        opening_balance: balance,
        open_key: None,
    };
    for caller in [&svc.member, &svc.operator] {
        let e = caller
            .open_account(&opening("member-rich", 1_000))
            .await
            .expect_err("an opening with money");
        assert_eq!(e.refusal(), Some((422, "INVALID_OPENING_BALANCE")), "{e}");
    }
    let empty = svc
        .member
        .open_account(&opening("member-1", 0))
        .await
        .expect("an empty account opens")
        .body;
    let accounts = svc
        .number(r#"SELECT COUNT(*) FROM account_service.accounts WHERE kind = 'MEMBER'"#)
        .await;
    assert_eq!(accounts, 1, "only the empty one");
    let money = svc
        .number(r#"SELECT COALESCE(SUM(balance), 0)::BIGINT FROM account_service.accounts"#)
        .await;
    assert_eq!(money, 0);

    // Money in by an authorized deposit, a hold on it, and the tools cannot release it.
    svc.member
        .deposit(&svc.deposit("topup:k1", "member-1", empty.id, 500))
        .await
        .expect("deposited");
    svc.place("res:1:hold", "member-1", 200).await;
    let e = svc
        .operator
        .release_hold("res:1:hold")
        .await
        .expect_err("the tools release nothing");
    assert_eq!(e.refusal(), Some((403, "FORBIDDEN_CALLER")), "{e}");
    assert_eq!(svc.funds(empty.id).await, (500, 200), "still held");
    svc.release("res:1:hold").await;
    assert_eq!(svc.funds(empty.id).await, (500, 0));
}
