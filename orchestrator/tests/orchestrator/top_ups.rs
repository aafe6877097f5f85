//! Top-ups (four eyes for money): an admin's top-up at or below
//! `STAFF_TOP_UP_FOUR_EYES_ABOVE` is deposited at once; above, it waits for a second
//! admin. Each deposit reaches the account service through the member service with the
//! orchestrator's signed authorization, and its ledger row names who asked and who
//! approved; every step is in the audit trail. Checked in PostgreSQL.

use std::time::Duration;

use orchestrator::Hooks;
use paysaga_common::{client::Answer, money::Amount};
use paysaga_console::Decision;
use paysaga_contracts::{
    account::api::Transaction,
    member::{api::Credentials, client::MemberClient},
    staff::api::{ApprovalKind, ApprovalState, StaffRole, TopUp, TopUpAnswer},
};
use sqlx::PgPool;
use uuid::Uuid;

use crate::staff::{approval_row, audit_of, audit_rows, rejected_with, tool, Signed};
use crate::support::{Orchestrator, Stack};

/// Top-ups above this wait for a second admin.
const LIMIT: i64 = 10_000;

/// The audit actions of a top-up and its approval.
const TOP_UP_ACTIONS: &[&str] = &[
    "TOP_UP",
    "TOP_UP_REQUESTED",
    "TOP_UP_APPROVED",
    "TOP_UP_REJECTED",
];

/// A stack with the member service, an orchestrator reaching it (top-ups above
/// [`LIMIT`] wait), and one signed-up member: (stack, orchestrator, member, account).
async fn with_a_member() -> (Stack, Orchestrator, Uuid, i64) {
    let mut s = Stack::start().await;
    let (mut c, member_url) = s.with_member_service().await;
    c.staff.top_up_four_eyes_above = LIMIT;
    c.staff.sign_in_burst = std::num::NonZeroU32::new(100).unwrap();
    let o = s.orchestrator(c, Hooks::default()).await;
    let member = MemberClient::new(&member_url, "none", Duration::from_secs(30))
        .sign_up(&Credentials {
            email: "topped@example.com".into(),
            password: "plum-orbit-canyon-47".into(),
        })
        .await
        .expect("sign up")
        .body;
    let account = member.account_id.expect("account opened at sign-up");
    (s, o, member.id, account)
}

fn top_up(member: Uuid, minor: i64, key: &str) -> TopUp {
    TopUp {
        member_id: member,
        amount: Amount::new(minor).unwrap(),
        reason: "goodwill after the outage".into(),
        key: key.into(),
    }
}

/// The account's DEPOSIT rows: (operation key, amount, requested_by, approved_by).
async fn deposits(
    pool: &PgPool,
    account: i64,
) -> Vec<(String, i64, Option<String>, Option<String>)> {
    sqlx::query_as(
        r#"SELECT operation_key, amount, requested_by, approved_by
           FROM account_service.transactions
           WHERE kind = 'DEPOSIT' AND account_id = $1 ORDER BY created_at"#,
    )
    .bind(account)
    .fetch_all(pool)
    .await
    .expect("deposits")
}

/// The account's ledger holds this one deposit, (operation key, amount, requested by,
/// approved by), and nothing else: the balance is its amount.
async fn assert_one_deposit(
    s: &Stack,
    account: i64,
    (key, amount, requested_by, approved_by): (&str, i64, &str, Option<&str>),
) {
    assert_eq!(
        deposits(&s.admin, account).await,
        vec![(
            key.into(),
            amount,
            Some(requested_by.into()),
            approved_by.map(Into::into)
        )]
    );
    assert_eq!(s.balance(account).await, amount);
}

/// `who` asks for a top-up of `minor` to `member` under `key`; the service answers.
async fn asks(
    who: &Signed,
    o: &Orchestrator,
    member: Uuid,
    minor: i64,
    key: &str,
) -> Answer<TopUpAnswer> {
    who.staff(o)
        .top_up(&top_up(member, minor, key))
        .await
        .expect("top-up answered")
}

/// A top-up asked again once deposited is answered 200 with that same deposit.
fn assert_replayed(answer: &Answer<TopUpAnswer>, deposit: &Transaction) {
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body.deposited().map(|t| t.id), Some(deposit.id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_top_up_at_the_limit_is_deposited_at_once_naming_who_asked() {
    let (s, o, member, account) = with_a_member().await;
    let alice = Signed::new(&o, "alice@example.com", StaffRole::Admin).await;
    let first = asks(&alice, &o, member, LIMIT, "goodwill-1").await;
    assert_eq!(first.status, 201);
    let TopUpAnswer::Deposited(deposit) = first.body else {
        panic!("not deposited: {:?}", first.body);
    };
    assert_eq!(deposit.operation_key, "topup:goodwill-1");
    // The same key again: the same deposit, nothing paid twice.
    let again = asks(&alice, &o, member, LIMIT, "goodwill-1").await;
    assert_replayed(&again, &deposit);
    let expected = ("topup:goodwill-1", LIMIT, "alice@example.com", None);
    assert_one_deposit(&s, account, expected).await;
    let approvals = s.count_of(r#"payment_service.approvals"#).await;
    assert_eq!(approvals, 0, "no approval at the limit");
    // Both answers, the first and the replay, are audited as the deposit.
    let m = member.to_string();
    let deposited = (
        "alice@example.com",
        "TOP_UP",
        "DONE",
        &*m,
        "deposit topup:goodwill-1",
    );
    assert_eq!(
        audit_of(&s.admin, TOP_UP_ACTIONS).await,
        audit_rows(&[deposited, deposited])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_top_up_above_the_limit_waits_for_a_second_admin_and_deposits_once() {
    let (s, o, member, account) = with_a_member().await;
    let alice = Signed::new(&o, "alice@example.com", StaffRole::Admin).await;
    let bob = Signed::new(&o, "bob@example.com", StaffRole::Admin).await;
    let amount = LIMIT + 1;

    // Alice asks: 202, a pending approval, nothing in the ledger.
    let asked = asks(&alice, &o, member, amount, "big-1").await;
    assert_eq!(asked.status, 202);
    let approval = asked.body.awaiting().cloned().expect("an approval");
    assert_eq!(approval.kind, ApprovalKind::TopUp);
    assert_eq!(approval.state, ApprovalState::Pending);
    assert_eq!(approval.member_id, Some(member));
    assert_eq!(approval.amount, amount);
    assert!(deposits(&s.admin, account).await.is_empty());
    // Asking again with the key answers the same approval.
    let again = asks(&alice, &o, member, amount, "big-1").await;
    assert_eq!(again.status, 202);
    assert_eq!(again.body.awaiting().map(|a| a.id), Some(approval.id));
    // The key with another amount is another top-up: refused.
    let reused = alice
        .staff(&o)
        .top_up(&top_up(member, amount + 1, "big-1"))
        .await;
    assert!(
        rejected_with(&reused, 409, "TOP_UP_KEY_REUSED"),
        "{reused:?}"
    );

    // Alice cannot approve her own; nothing deposited.
    let own = alice.staff(&o).approve(approval.id, Some("mine")).await;
    assert!(rejected_with(&own, 403, "SAME_PERSON"), "{own:?}");
    assert!(deposits(&s.admin, account).await.is_empty());

    // Bob approves: one deposit naming both, the balance raised once.
    let ticket = Some("checked the ticket");
    let decided = bob
        .decides(&o, approval.id, Decision::Approve, ticket)
        .await;
    assert_eq!(decided.approval.state, ApprovalState::Approved);
    let deposit = decided.deposit.expect("the deposit");
    assert_eq!(deposit.amount, amount);
    // Approving again, at once and later, and asking again: no second deposit.
    let (b1, b2) = (bob.staff(&o), bob.staff(&o));
    let (r1, r2) = tokio::join!(b1.approve(approval.id, None), b2.approve(approval.id, None));
    for r in [&r1, &r2] {
        assert!(rejected_with(r, 409, "APPROVAL_DECIDED"), "{r:?}");
    }
    let replay = asks(&alice, &o, member, amount, "big-1").await;
    assert_replayed(&replay, &deposit);
    let (requested_by, approved_by) = ("alice@example.com", Some("bob@example.com"));
    let expected = ("topup:big-1", amount, requested_by, approved_by);
    assert_one_deposit(&s, account, expected).await;
    assert_eq!(
        approval_row(&s.admin, approval.id).await,
        ("APPROVED".into(), Some(bob.created.staff.id))
    );

    let (alice, bob) = ("alice@example.com", "bob@example.com");
    let m = member.to_string();
    let approved = format!("approval {} APPROVED", approval.id);
    let pending = format!("approval {} PENDING", approval.id);
    assert_eq!(
        audit_of(&s.admin, TOP_UP_ACTIONS).await,
        audit_rows(&[
            (alice, "TOP_UP_REQUESTED", "DONE", &m, &pending),
            (alice, "TOP_UP_REQUESTED", "DONE", &m, &pending),
            (alice, "TOP_UP", "REFUSED", &m, "TOP_UP_KEY_REUSED"),
            (alice, "TOP_UP_APPROVED", "REFUSED", &m, "SAME_PERSON"),
            (bob, "TOP_UP_APPROVED", "DONE", &m, &approved),
            (bob, "TOP_UP", "DONE", &m, "deposit topup:big-1"),
            (bob, "TOP_UP_APPROVED", "REFUSED", &m, "APPROVAL_DECIDED"),
            (bob, "TOP_UP_APPROVED", "REFUSED", &m, "APPROVAL_DECIDED"),
            (alice, "TOP_UP", "DONE", &m, "deposit topup:big-1"),
        ]),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_an_admin_in_person_tops_up_and_a_rejected_one_deposits_nothing() {
    let (s, o, member, account) = with_a_member().await;
    let alice = Signed::new(&o, "alice@example.com", StaffRole::Admin).await;
    let bob = Signed::new(&o, "bob@example.com", StaffRole::Admin).await;
    let carol = Signed::new(&o, "carol@example.com", StaffRole::Operator).await;
    let victor = Signed::new(&o, "victor@example.com", StaffRole::Viewer).await;
    let small = top_up(member, 100, "small-1");

    for who in [&carol, &victor] {
        let r = who.staff(&o).top_up(&small).await;
        assert!(rejected_with(&r, 403, "FORBIDDEN_ROLE"), "{r:?}");
    }
    // The operator tools' credential is no person.
    let r = tool(&o).top_up(&small).await;
    assert!(rejected_with(&r, 401, "UNAUTHENTICATED"), "{r:?}");
    // Bad input: 4xx with a code.
    let mut no_reason = small.clone();
    no_reason.reason = "  ".into();
    let r = alice.staff(&o).top_up(&no_reason).await;
    assert!(rejected_with(&r, 422, "REASON_INVALID"), "{r:?}");
    let mut bad_key = small.clone();
    bad_key.key = "has spaces".into();
    let r = alice.staff(&o).top_up(&bad_key).await;
    assert!(rejected_with(&r, 422, "INVALID_TOP_UP_KEY"), "{r:?}");
    let r = alice
        .staff(&o)
        .top_up(&top_up(Uuid::now_v7(), 100, "nobody-1"))
        .await;
    assert!(rejected_with(&r, 404, "MEMBER_NOT_FOUND"), "{r:?}");
    let http = paysaga_common::client::http_client(Duration::from_secs(10));
    let zero = http
        .post(format!("{}/v1/top-ups", o.url))
        .bearer_auth(&alice.token)
        .json(&serde_json::json!({"member_id": member, "amount": 0, "reason": "r", "key": "zero"}))
        .send()
        .await
        .expect("sent");
    assert_eq!(zero.status().as_u16(), 422);
    assert!(deposits(&s.admin, account).await.is_empty());

    // Above the limit, rejected by a second admin: nothing deposited, and the key is
    // spent.
    let big = top_up(member, LIMIT * 3, "big-2");
    let approval = alice
        .staff(&o)
        .top_up(&big)
        .await
        .expect("asked")
        .body
        .awaiting()
        .cloned()
        .expect("an approval");
    let rejected = bob
        .decides(&o, approval.id, Decision::Reject, Some("no ticket"))
        .await;
    assert_eq!(rejected.approval.state, ApprovalState::Rejected);
    assert!(rejected.deposit.is_none());
    let again = alice.staff(&o).top_up(&big).await;
    assert!(rejected_with(&again, 409, "APPROVAL_DECIDED"), "{again:?}");
    assert!(deposits(&s.admin, account).await.is_empty());
    assert_eq!(s.balance(account).await, 0);
    let listed = alice
        .staff(&o)
        .approvals(&paysaga_contracts::staff::api::ListApprovals {
            kind: Some("TOP_UP".into()),
            ..Default::default()
        })
        .await
        .expect("listed")
        .body;
    assert_eq!(listed.approvals.len(), 1);
    assert_eq!(listed.approvals[0].kind, ApprovalKind::TopUp);
}
