//! The ingest of another service's outbox, against the real member service: its
//! sign-up writes `member.verification_requested`, one pull records the event in the
//! event log under the source `member` and acknowledges it there, and a second pull
//! finds nothing new.

use std::time::Duration;

use member::config::Argon2Params;
use paysaga_common::{
    auth::Audience,
    testkit::{service_token, InProcess},
};
use paysaga_contracts::{
    events::{types, MemberVerificationRequested},
    member::{api::Credentials, client::MemberClient},
};
use paysaga_webhooks::ingest::{pull_once, Puller, Source};
use serde_json::Value;

use crate::support::payments_db;

#[tokio::test]
async fn member_events_are_pulled_into_the_event_log_under_their_source() {
    let (db, pool) = payments_db(4).await;
    // The member service alone: with no account service its sign-up answers
    // ACCOUNT_PENDING, the member and its event stored all the same.
    let mut config = member::Config::local(
        db.role_url("member_app"),
        paysaga_common::testkit::dead_url().await,
    );
    config.argon2 = Argon2Params::TEST_ONLY_CHEAP;
    let service = InProcess::start("member", |listener, shutdown| {
        member::run(config, listener, shutdown)
    })
    .await;
    let email = "pulled@example.com";
    let signed_up = MemberClient::new(service.url(), "", Duration::from_secs(10))
        .sign_up(&Credentials {
            email: email.into(),
            password: "plum-orbit-canyon-47".into(),
        })
        .await;
    let admin = db.admin_pool().await;
    let member: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM member_service.members WHERE email = $1")
            .bind(email)
            .fetch_one(&admin)
            .await
            .unwrap_or_else(|e| panic!("the member is stored ({signed_up:?}): {e}"));

    let from = Puller {
        source: Source::Member,
        outbox: MemberClient::new(
            service.url(),
            service_token("orchestrator", Audience::Member),
            Duration::from_secs(10),
        )
        .events(),
    };
    assert_eq!(pull_once(&pool, &from, 100).await.expect("pull"), 1);
    let taken: Vec<(String, String, String, Value)> =
        sqlx::query_as("SELECT type, subject, source, data FROM events ORDER BY seq")
            .fetch_all(&pool)
            .await
            .expect("events");
    assert_eq!(taken.len(), 1);
    let (kind, subject, source, data) = &taken[0];
    assert_eq!(
        (kind.as_str(), subject.as_str(), source.as_str()),
        (
            types::MEMBER_VERIFICATION_REQUESTED,
            member.to_string().as_str(),
            "member"
        )
    );
    let payload: MemberVerificationRequested =
        serde_json::from_value(data.clone()).expect("the catalogue's payload");
    assert_eq!(
        (payload.member_id, payload.email),
        (member.to_string(), email.into())
    );
    assert!(!payload.token.is_empty());

    let relayed: bool = sqlx::query_scalar(
        "SELECT bool_and(relayed_at IS NOT NULL) FROM member_service.outbox_events",
    )
    .fetch_one(&admin)
    .await
    .expect("outbox");
    assert!(relayed, "acknowledged at the member service");
    assert_eq!(pull_once(&pool, &from, 100).await.expect("again"), 0);
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(count, 1);
}
