//! Sign-up: the member row, its account in the account service (exactly one, whatever
//! fails in between), email normalisation and the password policy.

use paysaga_common::auth::Audience;
use std::time::Duration;

use crate::support::{assert_throttled, creds, email, Stack, PASSWORD};
use paysaga_common::{auth::MemberId, client::CallError};
use paysaga_contracts::{
    account::{api::OpenAccountRequest, client::AccountClient},
    member::api::{account_open_key, codes},
};
use serde_json::json;

#[tokio::test]
async fn sign_up_creates_the_member_and_exactly_one_account() {
    let s = Stack::start().await;
    let address = email("ada");
    let member = s.sign_up(&address).await;
    assert_eq!(member.email, address);
    assert_eq!(member.id.get_version_num(), 7, "ids are UUIDv7");
    let accounts = s.accounts_of(member.id).await;
    assert_eq!(accounts.len(), 1, "one MEMBER account for the member");
    assert_eq!(member.account_id, Some(accounts[0]));
    assert_eq!(s.stored_account_id(member.id).await, Some(accounts[0]));
    let (balance, key): (i64, Option<String>) =
        sqlx::query_as("SELECT balance, open_key FROM account_service.accounts WHERE id = $1")
            .bind(accounts[0])
            .fetch_one(&s.admin)
            .await
            .unwrap();
    assert_eq!(balance, 0);
    assert_eq!(key.as_deref(), Some(account_open_key(member.id).as_str()));
    let phc = s.password_hash(member.id).await;
    assert!(
        phc.starts_with("$argon2id$"),
        "a PHC string, never the password"
    );
    assert!(!phc.contains(PASSWORD));
}

#[tokio::test]
async fn a_taken_email_is_409_even_written_differently() {
    let s = Stack::start().await;
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    s.sign_up(&format!(" Foo.{suffix}@Example.COM ")).await;
    for again in [
        format!("foo.{suffix}@example.com"),
        format!("FOO.{suffix}@EXAMPLE.COM"),
    ] {
        let e = s.sign_up_refused(&again, "another-long-password-9").await;
        assert_eq!(e.status(), Some(409));
        assert_eq!(e.code(), Some(codes::EMAIL_TAKEN));
    }
    // The same member signing up again with its own password: complete, so taken too.
    let e = s
        .sign_up_refused(&format!("foo.{suffix}@example.com"), PASSWORD)
        .await;
    assert_eq!(e.code(), Some(codes::EMAIL_TAKEN));
    let stored: Vec<String> = sqlx::query_scalar("SELECT email FROM member_service.members")
        .fetch_all(&s.admin)
        .await
        .unwrap();
    assert_eq!(stored, vec![format!("foo.{suffix}@example.com")]);
}

#[tokio::test]
async fn each_password_rule_and_bad_emails_are_422_with_their_code() {
    let s = Stack::start().await;
    let cases = [
        (
            "marguerite@example.com",
            "short-pass",
            codes::PASSWORD_TOO_SHORT,
        ),
        (
            "marguerite@example.com",
            &"x".repeat(129),
            codes::PASSWORD_TOO_LONG,
        ),
        (
            "marguerite@example.com",
            "my-Marguerite-2026",
            codes::PASSWORD_CONTAINS_EMAIL,
        ),
        (
            "marguerite@example.com",
            "Password1234",
            codes::PASSWORD_TOO_COMMON,
        ),
        (
            "marguerite@example.com",
            "QWERTY123456",
            codes::PASSWORD_TOO_COMMON,
        ),
        ("not-an-email", PASSWORD, codes::INVALID_EMAIL),
        ("two@@example.com", PASSWORD, codes::INVALID_EMAIL),
        ("nodot@example", PASSWORD, codes::INVALID_EMAIL),
        ("@example.com", PASSWORD, codes::INVALID_EMAIL),
    ];
    for (address, password, code) in cases {
        let e = s.sign_up_refused(address, password).await;
        assert_eq!(e.status(), Some(422), "{address} / {password}");
        assert_eq!(e.code(), Some(code), "{address} / {password}");
    }
    let long = format!("{}@example.com", "a".repeat(250));
    let e = s.sign_up_refused(&long, PASSWORD).await;
    assert_eq!(e.code(), Some(codes::INVALID_EMAIL));
    // A local part under four characters is no rule.
    let ok = s
        .client
        .sign_up(&creds("bob@example.com", "bob-orbit-canyon-47"))
        .await
        .expect("accepted");
    assert_eq!(ok.status, 201);
    assert_eq!(s.members().await, 1, "nothing refused was stored");
}

#[tokio::test]
async fn a_failed_opening_is_pending_then_repaired_into_exactly_one_account() {
    let mut s = Stack::without_account().await;
    let address = email("pending");
    let (status, headers, body) = s
        .post(
            "/v1/members",
            &json!({"email": address, "password": PASSWORD}),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], codes::ACCOUNT_PENDING);
    assert!(headers.contains_key("retry-after"));
    let id = s.member_id_of(&address).await;
    assert_eq!(
        s.stored_account_id(id).await,
        None,
        "the member exists, no account"
    );

    // The account service comes up; one repair pass opens the account.
    let (account, config) = s.account_comes_up().await;
    let state = Stack::state(&config).await;
    let repaired = member::repair_accounts(&state, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(repaired.opened, 1);
    assert_eq!(repaired.failed, 0);
    let accounts = s.accounts_of(id).await;
    assert_eq!(accounts.len(), 1);
    assert_eq!(s.stored_account_id(id).await, Some(accounts[0]));

    // Again, and a retried sign-up: nothing new.
    let again = member::repair_accounts(&state, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(again, member::Repaired::default());
    let (second, client) = Stack::start_member(config.clone()).await;
    let e = client
        .sign_up(&creds(&address, PASSWORD))
        .await
        .expect_err("complete now");
    assert_eq!(e.code(), Some(codes::EMAIL_TAKEN));
    assert_eq!(
        s.accounts_of(id).await,
        accounts,
        "still exactly one account"
    );
    drop(second);
    s.account = Some(account);
}

#[tokio::test]
async fn the_repair_job_leaves_young_members_to_their_own_request() {
    let (s, address) = Stack::with_pending_member("young").await;
    let (_account, config) = s.account_comes_up().await;
    let state = Stack::state(&config).await;
    let none = member::repair_accounts(&state, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(none, member::Repaired::default());
    let id = s.member_id_of(&address).await;
    assert!(s.accounts_of(id).await.is_empty());
}

#[tokio::test]
async fn a_retried_sign_up_completes_the_opening_and_a_wrong_password_cannot() {
    let (s, address) = Stack::with_pending_member("retry").await;
    let (_account, config) = s.account_comes_up().await;
    let (_second, client) = Stack::start_member(config).await;

    let e = client
        .sign_up(&creds(&address, "somebody-else-entirely-1"))
        .await
        .expect_err("someone else's password");
    assert_eq!(e.code(), Some(codes::EMAIL_TAKEN));
    let id = s.member_id_of(&address).await;
    assert!(
        s.accounts_of(id).await.is_empty(),
        "a wrong password opens nothing"
    );

    let done = client
        .sign_up(&creds(&address.to_uppercase(), PASSWORD))
        .await
        .expect("the retry completes");
    assert_eq!(done.status, 201);
    assert_eq!(done.body.id, id);
    let accounts = s.accounts_of(id).await;
    assert_eq!(accounts.len(), 1);
    assert_eq!(done.body.account_id, Some(accounts[0]));
}

#[tokio::test]
async fn an_account_opened_but_never_stored_is_found_again_not_doubled() {
    let (s, address) = Stack::with_pending_member("crash").await;
    let id = s.member_id_of(&address).await;

    // As if the member service had crashed right after the account service answered.
    let (account, config) = s.account_comes_up().await;
    let accounts = AccountClient::new(
        account.url(),
        paysaga_common::testkit::service_token("member", Audience::Account),
        Duration::from_secs(10),
    );
    let opened = accounts
        .open_account(&OpenAccountRequest {
            member_id: MemberId::parse(id.to_string()).unwrap(),
            opening_balance: 0,
            open_key: Some(account_open_key(id)),
        })
        .await
        .expect("opened");
    assert_eq!(opened.status, 201);

    let state = Stack::state(&config).await;
    let repaired = member::repair_accounts(&state, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(repaired.opened, 1);
    assert_eq!(s.stored_account_id(id).await, Some(opened.body.id));
    assert_eq!(s.accounts_of(id).await, vec![opened.body.id]);
}

#[tokio::test]
async fn sign_in_opens_a_pending_account_too() {
    let s = Stack::without_account().await;
    let address = email("signin-repair");
    let e = s.sign_up_pending(&address).await;
    assert!(matches!(
        e,
        CallError::Unknown {
            status: Some(503),
            ..
        }
    ));
    let (_account, config) = s.account_comes_up().await;
    let (_second, client) = Stack::start_member(config).await;
    let session = client
        .sign_in(&creds(&address, PASSWORD))
        .await
        .expect("signed in");
    let accounts = s.accounts_of(session.body.member_id).await;
    assert_eq!(accounts.len(), 1);
    assert_eq!(
        s.stored_account_id(session.body.member_id).await,
        Some(accounts[0])
    );
}

#[tokio::test]
async fn retried_sign_ups_cannot_be_used_to_guess_a_pending_members_password() {
    let s = Stack::start_with(false, |c| c.throttle.per_pair = 2).await;
    let address = email("guess");
    s.sign_up_pending(&address).await;
    for guess in ["first-wrong-guess-1", "second-wrong-guess-2"] {
        let e = s.sign_up_refused(&address, guess).await;
        assert_eq!(e.code(), Some(codes::EMAIL_TAKEN));
    }
    assert_throttled(
        &s.post(
            "/v1/members",
            &json!({"email": address, "password": PASSWORD}),
        )
        .await,
    );
    let e = s
        .client
        .sign_in(&creds(&address, PASSWORD))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(429), "and sign-in counts them too");
}
