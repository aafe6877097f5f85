//! The account service over TLS, as its callers reach it when `TLS_CERT_FILE` and
//! `TLS_KEY_FILE` are set: served with a certificate the test made, called through the
//! typed client trusting the test's CA (`TLS_CA_FILE`); a caller that does not trust
//! that CA, or that names a host the certificate does not, is refused before any
//! request is sent.

use std::time::Duration;

use account::Config;
use paysaga_common::{
    auth::{Audience, MemberId},
    client::{http_client, http_client_trusting, CallError},
    testkit::{service_token, InProcess, TestDb, TestPki},
};
use paysaga_contracts::account::{api::OpenAccountRequest, client::AccountClient};

fn opening(member: &str) -> OpenAccountRequest {
    OpenAccountRequest {
        member_id: MemberId::parse(member).expect("member id"),
        opening_balance: 500,
        open_key: None,
    }
}

#[tokio::test]
async fn callers_reach_the_service_over_tls_only_through_a_certificate_they_trust() {
    let db = TestDb::new().await;
    // A certificate for the address only: `localhost` is a name it does not carry.
    let pki = TestPki::for_names(&["127.0.0.1"]);
    let trust = pki.trust();
    let mut config = Config::local(db.role_url("account_app"));
    config.process.tls = Some(pki.server());
    let service = InProcess::start_tls("account", &trust, |listener, shutdown| {
        account::run(config, listener, shutdown)
    })
    .await;
    let base = service.url();
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    let operator = || service_token("operator", Audience::Account);

    // Through the shared client trusting the test's CA, as another service calls it.
    let trusted = AccountClient::with_http(
        http_client_trusting(Duration::from_secs(10), &trust),
        &base,
        operator(),
    );
    let opened = trusted
        .open_account(&opening("member-tls"))
        .await
        .expect("opened over TLS")
        .body;
    let admin = db.admin_pool().await;
    let balance: i64 =
        sqlx::query_scalar(r#"SELECT balance FROM account_service.accounts WHERE id = $1"#)
            .bind(opened.id)
            .fetch_one(&admin)
            .await
            .expect("the account");
    assert_eq!(balance, 500);

    // The platform's roots only: the test's CA is unknown, nothing is sent.
    let stranger =
        AccountClient::with_http(http_client(Duration::from_secs(10)), &base, operator());
    let refused = stranger
        .open_account(&opening("member-untrusted"))
        .await
        .expect_err("an unknown CA is refused");
    assert!(
        matches!(refused, CallError::Unknown { status: None, .. }),
        "{refused:?}"
    );
    let why = http_client(Duration::from_secs(10))
        .get(format!("{base}/healthz"))
        .send()
        .await
        .expect_err("an unknown CA is refused");
    assert!(format!("{why:?}").contains("UnknownIssuer"), "{why:?}");

    // The trusted CA, but a host name the certificate does not carry.
    let port = service.addr.port();
    let why = http_client_trusting(Duration::from_secs(10), &trust)
        .get(format!("https://localhost:{port}/healthz"))
        .send()
        .await
        .expect_err("a name the certificate does not carry is refused");
    assert!(format!("{why:?}").contains("NotValidForName"), "{why:?}");

    // Plain HTTP to the TLS listener gets no answer.
    let plain = http_client(Duration::from_secs(10))
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await;
    assert!(
        plain.as_ref().map_or(true, |r| !r.status().is_success()),
        "{plain:?}"
    );

    let members: Vec<String> = sqlx::query_scalar(
        r#"SELECT member_id FROM account_service.accounts WHERE kind = 'MEMBER'"#,
    )
    .fetch_all(&admin)
    .await
    .expect("member accounts");
    assert_eq!(members, ["member-tls"], "only the trusted call wrote");
}
