//! Top-ups through the account service's ledger, and bulk sign-up for seeding.

use std::time::Duration;

use crate::support::{creds, email, Stack, PASSWORD};
use paysaga_common::{
    auth::Audience,
    money::Amount,
    testkit::{buyer_token, deposit_authorization, service_token},
};
use paysaga_contracts::{
    account::api::{OperationKey, TransactionKind},
    member::{
        api::{codes, BulkMember, BulkSignUpRequest, TopUpRequest, MAX_BULK_MEMBERS},
        client::MemberClient,
    },
};

/// A top-up of `member` as the orchestrator sends it: with its deposit authorization.
fn top_up(member: uuid::Uuid, key: &str, minor: i64) -> TopUpRequest {
    TopUpRequest {
        operation_key: OperationKey::parse(key).unwrap(),
        amount: Amount::new(minor).unwrap(),
        authorization: Some(deposit_authorization(
            &member.to_string(),
            minor,
            key,
            "admin@example.com",
            None,
        )),
    }
}

/// The member service as the orchestrator calls it (the only caller of top-ups).
fn orchestrator(s: &Stack) -> MemberClient {
    MemberClient::new(
        &s.base,
        service_token("orchestrator", Audience::Member),
        Duration::from_secs(30),
    )
}

#[tokio::test]
async fn a_top_up_is_a_deposit_once_per_key() {
    let s = Stack::start().await;
    let member = s.sign_up(&email("topup")).await;
    let account_id = member.account_id.expect("account open");
    let client = orchestrator(&s);
    let (client, id) = (&client, member.id);
    let top_up_member = move |key, minor| {
        let req = top_up(id, key, minor);
        async move { client.top_up(id, &req).await }
    };
    let first = top_up_member("topup:1", 5_000).await.expect("deposited");
    assert_eq!(first.status, 201);
    assert_eq!(first.body.kind, TransactionKind::Deposit);
    assert_eq!(first.body.account_id, account_id);
    let replay = top_up_member("topup:1", 5_000).await.expect("replayed");
    assert_eq!(replay.status, 200);
    assert_eq!(replay.body.id, first.body.id);
    let reused = top_up_member("topup:1", 7_000)
        .await
        .expect_err("same key, another amount");
    assert_eq!(reused.status(), Some(409));
    assert_eq!(reused.code(), Some("OPERATION_KEY_REUSED"));

    let (deposits, balance): (i64, i64) = sqlx::query_as(
        r#"SELECT (SELECT COUNT(*) FROM account_service.transactions
                    WHERE kind = 'DEPOSIT' AND account_id = $1 AND operation_key = 'topup:1'),
                  (SELECT balance FROM account_service.accounts WHERE id = $1)"#,
    )
    .bind(account_id)
    .fetch_one(&s.admin)
    .await
    .unwrap();
    assert_eq!((deposits, balance), (1, 5_000));
    let requested_by: Option<String> = sqlx::query_scalar(
        r#"SELECT requested_by FROM account_service.transactions WHERE operation_key = 'topup:1'"#,
    )
    .fetch_one(&s.admin)
    .await
    .unwrap();
    assert_eq!(requested_by.as_deref(), Some("admin@example.com"));

    // Without the orchestrator's authorization the account service writes nothing,
    // and the member service passes its refusal on.
    let mut unsigned = top_up(id, "topup:4", 1);
    unsigned.authorization = None;
    let e = client.top_up(id, &unsigned).await.expect_err("unsigned");
    assert_eq!(e.status(), Some(403));
    assert_eq!(e.code(), Some("DEPOSIT_NOT_APPROVED"));
    // The operator tools may no longer top up: the orchestrator alone calls this route.
    let e = s
        .client
        .top_up(id, &top_up(id, "topup:5", 1))
        .await
        .expect_err("operator");
    assert_eq!(e.status(), Some(403));
    assert_eq!(e.code(), Some("FORBIDDEN_CALLER"));
    let deposits = s
        .count(r#"SELECT COUNT(*) FROM account_service.transactions WHERE kind = 'DEPOSIT'"#)
        .await;
    assert_eq!(deposits, 1, "the refusals wrote nothing");

    let nobody = uuid::Uuid::now_v7();
    let missing = client
        .top_up(nobody, &top_up(nobody, "topup:2", 1))
        .await
        .expect_err("no member");
    assert_eq!(missing.code(), Some(codes::MEMBER_NOT_FOUND));
    // A buyer cannot top up, even its own account.
    let buyer = MemberClient::new(
        &s.base,
        buyer_token(&member.id.to_string()),
        Duration::from_secs(5),
    );
    let e = buyer
        .top_up(member.id, &top_up(member.id, "topup:3", 1))
        .await
        .expect_err("forbidden");
    assert_eq!(e.status(), Some(403));
}

#[tokio::test]
async fn a_top_up_before_the_account_is_open_is_409_pending() {
    let (s, address) = Stack::with_pending_member("early").await;
    let id = s.member_id_of(&address).await;
    let e = orchestrator(&s)
        .top_up(id, &top_up(id, "early:1", 100))
        .await
        .expect_err("pending");
    assert_eq!(e.status(), Some(409));
    assert_eq!(e.code(), Some(codes::ACCOUNT_PENDING));
}

fn bulk(emails: &[String], opening: Option<i64>) -> BulkSignUpRequest {
    BulkSignUpRequest {
        password: PASSWORD.into(),
        members: emails
            .iter()
            .map(|e| BulkMember { email: e.clone() })
            .collect(),
        opening_balance: opening,
    }
}

#[tokio::test]
async fn bulk_sign_up_seeds_members_with_accounts_and_sessions() {
    let s = Stack::start_with(true, |c| c.bulk_signup = true).await;
    let emails: Vec<String> = (0..40).map(|i| email(&format!("bulk{i}"))).collect();
    let first = s
        .client
        .bulk_sign_up(&bulk(&emails, Some(10_000)))
        .await
        .expect("bulk");
    assert_eq!(first.body.members.len(), 40);
    for (sent, got) in emails.iter().zip(&first.body.members) {
        assert_eq!(&got.member.email, sent, "in request order");
        assert_eq!(got.session.member_id, got.member.id);
        assert!(got.member.account_id.is_some());
    }
    // One hash for all of them, one account each with the opening balance.
    let (hashes, members) = s
        .counts("SELECT COUNT(DISTINCT password_hash), COUNT(*) FROM member_service.members")
        .await;
    assert_eq!((hashes, members), (1, 40));
    let (accounts, total) = s
        .counts(
            "SELECT COUNT(*), SUM(balance)::BIGINT FROM account_service.accounts WHERE kind = 'MEMBER'",
        )
        .await;
    assert_eq!((accounts, total), (40, 400_000));
    // Each session is a working one.
    let one = &first.body.members[7];
    assert_eq!(
        s.client
            .me(&one.session.access_token)
            .await
            .unwrap()
            .body
            .id,
        one.member.id
    );
    s.client
        .refresh(&one.session.refresh_token)
        .await
        .expect("refreshable");
    // Members sign in with the shared password as anyone would.
    s.client
        .sign_in(&creds(&emails[3], PASSWORD))
        .await
        .expect("sign-in");

    // Sending the same emails again: the same members, new sessions, no new accounts.
    let again = s
        .client
        .bulk_sign_up(&bulk(&emails, Some(10_000)))
        .await
        .expect("again");
    for (a, b) in first.body.members.iter().zip(&again.body.members) {
        assert_eq!(a.member, b.member);
        assert_ne!(a.session.refresh_token, b.session.refresh_token);
    }
    let accounts = s
        .count("SELECT COUNT(*) FROM account_service.accounts WHERE kind = 'MEMBER'")
        .await;
    assert_eq!(accounts, 40);

    // A member who signed up with its own password is not handed out.
    let own = s.signed_up("own").await;
    let mut req = bulk(std::slice::from_ref(&own), None);
    req.password = "different-long-password-1".into();
    let e = s.client.bulk_sign_up(&req).await.expect_err("taken");
    assert_eq!(e.code(), Some(codes::EMAIL_TAKEN));
}

#[tokio::test]
async fn bulk_sign_up_is_bounded_checked_and_off_by_default() {
    let off = Stack::start().await;
    let e = off
        .client
        .bulk_sign_up(&bulk(&[email("x")], None))
        .await
        .expect_err("off");
    assert_eq!(e.status(), Some(404));

    let s = Stack::start_with(true, |c| c.bulk_signup = true).await;
    let e = s.client.bulk_sign_up(&bulk(&[], None)).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::BULK_TOO_LARGE));
    let many: Vec<String> = (0..=MAX_BULK_MEMBERS)
        .map(|i| format!("m{i}@example.com"))
        .collect();
    let e = s.client.bulk_sign_up(&bulk(&many, None)).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::BULK_TOO_LARGE));
    let e = s
        .client
        .bulk_sign_up(&bulk(&[email("a"), "broken".into()], None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(codes::INVALID_EMAIL));
    let e = s
        .client
        .bulk_sign_up(&bulk(&[email("a")], Some(-1)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(codes::INVALID_OPENING_BALANCE));
    let mut weak = bulk(&[email("a")], None);
    weak.password = "short".into();
    let e = s.client.bulk_sign_up(&weak).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::PASSWORD_TOO_SHORT));
    assert_eq!(s.members().await, 0, "nothing refused was stored");
    let buyer = MemberClient::new(&s.base, buyer_token("someone"), Duration::from_secs(5));
    assert_eq!(
        buyer
            .bulk_sign_up(&bulk(&[email("a")], None))
            .await
            .unwrap_err()
            .status(),
        Some(403)
    );
}
