//! The payment saga end to end: the real account and order services, real PostgreSQL,
//! and every outcome checked in the tables (money invariant included).

use paysaga_common::auth::Audience;
use std::{sync::Arc, time::Duration};

use crate::support::{after_debit, pay_request, Stack, PRICE};
use orchestrator::Hooks;
use paysaga_common::{client::CallError, testkit::buyer_token};
use paysaga_contracts::orchestrator::api::{PaymentTimeline, Step};
use tokio::sync::Notify;
use uuid::Uuid;
use workflows::Action;

/// The steps of a payment that went through: debited, confirmed, completed.
const COMPLETED: [(&str, &str); 3] = [
    ("DEBIT", "SUCCEEDED"),
    ("CONFIRM", "SUCCEEDED"),
    ("COMPLETE", "SUCCEEDED"),
];

/// The timeline's steps as (action, outcome), in order.
fn steps(tl: &PaymentTimeline) -> Vec<(&str, &str)> {
    tl.steps
        .iter()
        .map(|s| (s.action.as_str(), s.outcome.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn happy_path_completes_with_one_debit() {
    let mut s = Stack::start().await;
    let (acct, res) = s.buyer_with_reservation("buyer-1", 100_000, 3).await;
    let o = s.orchestrator(s.config(), Hooks::default()).await;

    let answer = o
        .pay("buyer-1", "checkout-1", res, acct)
        .await
        .expect("pay");
    assert!(
        matches!(answer.status, 201 | 202),
        "status {}",
        answer.status
    );
    assert_eq!(
        answer.payment.amount, PRICE,
        "the amount comes from the reservation"
    );
    assert!(!answer.replayed);
    let id = answer.payment.id;
    assert_eq!(s.settled(id).await, "COMPLETED");
    assert_eq!(s.unit_state(res).await, "SOLD");
    assert_eq!(s.reservation_state(res).await, "CONFIRMED");
    assert_eq!(s.applied_debits(id).await, 1);
    assert_eq!(s.balance(acct).await, 100_000 - PRICE, "buyer debited once");
    assert_eq!(s.merchant_balance().await, PRICE, "merchant credited once");

    let tl = o.timeline(id).await;
    assert_eq!(steps(&tl), COMPLETED);
    assert_eq!(tl.steps[0].operation_key, format!("pay:{id}:debit"));
    assert!(tl
        .steps
        .iter()
        .enumerate()
        .all(|(i, st)| st.seq == i as i64 + 1));
    // Confirm and the local COMPLETE are recorded by one statement: the log must still
    // read as one move per step, each starting where the previous one ended.
    let moves: Vec<(&str, &str)> = tl
        .steps
        .iter()
        .map(|st| (st.from_state.as_str(), st.to_state.as_str()))
        .collect();
    assert_eq!(
        moves,
        [
            ("PROCESSING", "ACCOUNT_DEBITED"),
            ("ACCOUNT_DEBITED", "ORDER_CONFIRMED"),
            ("ORDER_CONFIRMED", "COMPLETED")
        ]
    );
    assert!(tl.steps.iter().all(|st| st.driver == tl.steps[0].driver));

    let metrics = paysaga_common::testkit::scrape_metrics().await;
    assert!(
        metrics.contains("orchestrator_step_seconds"),
        "step latency exported"
    );

    // The buyer reads it back; another buyer cannot see it.
    let mine = o.payment_of("buyer-1", id).await;
    assert_eq!(mine.state, "COMPLETED");
    assert!(o
        .buyer("buyer-2")
        .payment(id)
        .await
        .is_err_and(|e| e.is_not_found()));
    s.check_money().await;
}

/// The 201 is stored by the statement that records the settling move (the key's
/// `updated_at` is that transaction's `now()`, the step log's too), and what is stored
/// is exactly the payment as the row holds it: the replay and a read agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_answer_is_stored_with_the_settling_move() {
    let mut s = Stack::start().await;
    let o = s.orchestrator(s.config(), Hooks::default()).await;
    let product = s.product(3).await;
    for (n, released) in [(1, false), (2, true)] {
        let member = format!("answered-{n}");
        let acct = s.open_account(&member, 100_000).await;
        let res = s.reserve(product, &member).await;
        if released {
            s.release_hold(res).await;
        }
        let key = format!("answered-key-{n}");
        let answer = o
            .buyer(&member)
            .pay(&key, &pay_request(res, acct))
            .await
            .expect("pay");
        assert_eq!(answer.status, 201, "settled within the wait");
        let expected = if released { "FAILED" } else { "COMPLETED" };
        assert_eq!(answer.payment.state, expected);
        let (status, body, same_transaction): (i32, String, bool) = sqlx::query_as(
            r#"
            SELECT k.response_status, k.response_body,
                   k.updated_at = (SELECT MAX(st.created_at) FROM payment_service.payment_steps st
                                   WHERE st.payment_id = k.payment_id)
            FROM payment_service.idempotency_keys k
            WHERE k.member_id = $1 AND k.idem_key = $2 AND k.status = 'COMPLETED'
            "#,
        )
        .bind(&member)
        .bind(&key)
        .fetch_one(&s.admin)
        .await
        .expect("the key is answered");
        assert_eq!(status, 201);
        assert!(same_transaction, "stored by the settling move's statement");
        let stored: orchestrator::api::Payment = serde_json::from_str(&body).expect("a payment");
        let read = o.payment_of(&member, answer.payment.id).await;
        assert_eq!(stored, read, "the stored answer is the row as it is");
        assert_eq!(stored, answer.payment, "and what the buyer was told");
        o.replays(&member, &key, res, acct, &answer.payment).await;
    }
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_released_hold_fails_the_payment_and_releases_the_unit() {
    let mut s = Stack::start().await;
    let (acct, res) = s.buyer_with_reservation("released-1", PRICE, 1).await;
    // The reservation's money is no longer held (as after the reconciliation or an
    // operator released it): the debit that would capture it is a definite decline.
    s.release_hold(res).await;
    let o = s.orchestrator(s.config(), Hooks::default()).await;

    let id = o.pay_k1("released-1", res, acct).await;
    assert_eq!(s.settled(id).await, "FAILED");
    let p = o.payment_of("released-1", id).await;
    assert_eq!(p.failure_code.as_deref(), Some("HOLD_RELEASED"));
    assert_eq!(s.applied_debits(id).await, 0);
    assert_eq!(s.balance(acct).await, PRICE, "no money moved");
    assert_eq!(s.merchant_balance().await, 0);
    assert_eq!(
        s.unit_state(res).await,
        "AVAILABLE",
        "the unit is back on sale"
    );
    assert_eq!(s.reservation_state(res).await, "CANCELLED");
    let tl = o.timeline(id).await;
    assert_eq!(
        steps(&tl),
        [("DEBIT", "REJECTED"), ("CANCEL_RESERVATION", "SUCCEEDED")]
    );
    // The decline is on record for the key: asked again, it is declined again.
    let declined: (String, String) = sqlx::query_as(
        r#"SELECT status, declined_for FROM account_service.transactions WHERE operation_key = $1"#,
    )
    .bind(format!("pay:{id}:debit"))
    .fetch_one(&s.admin)
    .await
    .expect("the decline");
    assert_eq!(declined, ("DECLINED".into(), "HOLD_RELEASED".into()));
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hold_past_its_deadline_fails_the_payment_and_nothing_is_taken() {
    let mut s = Stack::start().await;
    let (acct, res) = s.buyer_with_reservation("lapsed-1", PRICE, 1).await;
    // The hold's deadline passed, though the reservation has not been swept yet.
    sqlx::query(
        r#"UPDATE account_service.holds
           SET created_at = now() - INTERVAL '1 hour', expires_at = now() - INTERVAL '1 second'
           WHERE operation_key = $1"#,
    )
    .bind(paysaga_contracts::order::api::hold_key(res))
    .execute(&s.admin)
    .await
    .expect("lapse the hold");
    let o = s.orchestrator(s.config(), Hooks::default()).await;
    let id = o.pay_k1("lapsed-1", res, acct).await;
    assert_eq!(s.settled(id).await, "FAILED");
    let p = o.payment_of("lapsed-1", id).await;
    // Lapsed, and released by the account's sweep if it ran first: either way declined.
    assert!(
        matches!(
            p.failure_code.as_deref(),
            Some("HOLD_EXPIRED" | "HOLD_RELEASED")
        ),
        "{:?}",
        p.failure_code
    );
    assert_eq!(s.applied_debits(id).await, 0);
    assert_eq!(s.balance(acct).await, PRICE);
    assert_eq!(s.reservation_state(res).await, "CANCELLED");
    assert_eq!(s.unit_state(res).await, "AVAILABLE");
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reservation_expiring_before_confirm_is_refunded() {
    let (s, acct, res) = Stack::with_buyer("late-1").await;
    // Right after the debit commits, the reservation runs out.
    let expire = after_debit(s.admin.clone(), move |admin| async move {
        sqlx::query(r#"UPDATE order_service.reservations SET expires_at = now() - INTERVAL '1 second' WHERE id = $1"#)
            .bind(res)
            .execute(&admin)
            .await
            .expect("expire reservation");
    });
    let o = s.orchestrator(s.config(), expire).await;

    let id = o.pay_k1("late-1", res, acct).await;
    assert_eq!(s.settled(id).await, "REFUNDED");
    assert_eq!(s.applied_debits(id).await, 1, "debited once");
    assert_eq!(s.balance(acct).await, 100_000, "net money moved is 0");
    assert_eq!(s.merchant_balance().await, 0);
    assert_eq!(s.unit_state(res).await, "AVAILABLE");
    let tl = o.timeline(id).await;
    assert_eq!(
        steps(&tl),
        [
            ("DEBIT", "SUCCEEDED"),
            ("CONFIRM", "REJECTED"),
            ("REFUND", "SUCCEEDED")
        ]
    );
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn debit_slower_than_the_timeout_is_learned_by_operation_key() {
    let (s, acct, res) = Stack::with_buyer("slow-1").await;
    let (proxy, config) = s.via_slow_debit(Duration::from_millis(2000)).await;
    let o = s.orchestrator(config, Hooks::default()).await;

    let answer = o.pay("slow-1", "k1", res, acct).await.expect("pay");
    let id = answer.payment.id;
    assert_eq!(s.settled(id).await, "COMPLETED");
    assert!(proxy.counts().slowed == 1, "the debit answer was held back");
    assert_eq!(s.applied_debits(id).await, 1, "exactly one debit");
    assert_eq!(s.balance(acct).await, 100_000 - PRICE);
    let tl = o.timeline(id).await;
    let debits = timed_out_never_rejected(&tl, "DEBIT");
    assert_eq!(
        debits.iter().filter(|st| st.outcome == "SUCCEEDED").count(),
        1
    );
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirm_slower_than_the_timeout_is_learned_from_the_reservation() {
    let (s, acct, res) = Stack::with_buyer("slow-2").await;
    let trigger = format!(r#""op":"confirm","reservation_id":"{res}""#);
    let (proxy, config) = s.via_order_proxy().await;
    proxy.slow_first_answer(trigger.as_bytes(), Duration::from_millis(2000));
    let o = s.orchestrator(config, Hooks::default()).await;

    let id = o.pay_k1("slow-2", res, acct).await;
    assert_eq!(s.settled(id).await, "COMPLETED");
    assert!(
        proxy.counts().slowed == 1,
        "the confirm answer was held back"
    );
    assert_eq!(s.unit_state(res).await, "SOLD");
    assert_eq!(s.applied_debits(id).await, 1);
    let tl = o.timeline(id).await;
    timed_out_never_rejected(&tl, "CONFIRM");
    assert!(
        tl.steps.iter().all(|st| st.action != "REFUND"),
        "no refund for a confirmed order"
    );
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orchestrator_killed_after_the_debit_is_finished_by_recovery() {
    let (s, acct, res) = Stack::with_buyer("crash-1").await;

    // Instance A dies between the debit's answer and recording it.
    let reached = Arc::new(Notify::new());
    let die_after_debit = after_debit(reached.clone(), |reached| async move {
        reached.notify_one();
        std::future::pending::<()>().await;
    });
    let mut config = s.config();
    config.lease = Duration::from_millis(1500);
    config.response_wait = Duration::from_millis(1000);
    let mut a = s.orchestrator(config.clone(), die_after_debit).await;
    let buyer_a = a.buyer("crash-1");
    let req = pay_request(res, acct);
    let first = tokio::spawn(async move { buyer_a.pay("k-crash", &req).await });
    reached.notified().await;
    a.kill();
    let id = s.payment_id_for(res).await;
    assert_eq!(s.applied_debits(id).await, 1, "the debit committed");
    let before: (String, i64) = s.payment_columns("state, version", id).await;
    assert_eq!(
        before,
        ("PROCESSING".to_string(), 0),
        "nothing recorded after the debit"
    );

    // Instance B starts; its recovery job takes over once A's lease has expired.
    let b = s.orchestrator(config, Hooks::default()).await;
    assert_eq!(s.settled(id).await, "COMPLETED");
    assert_eq!(s.applied_debits(id).await, 1, "exactly one debit");
    assert_eq!(s.balance(acct).await, 100_000 - PRICE);
    assert_eq!(s.unit_state(res).await, "SOLD");
    let tl = b.operator().timeline(id).await.expect("timeline").body;
    assert_eq!(steps(&tl), COMPLETED);

    // The buyer's retry of the interrupted request (A held its key) is answered by B.
    let _ = first.await;
    let retry = b.pay("crash-1", "k-crash", res, acct).await.expect("retry");
    assert_eq!(retry.payment.id, id);
    assert_eq!(retry.payment.state, "COMPLETED");
    b.replays("crash-1", "k-crash", res, acct, &retry.payment)
        .await;
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundred_concurrent_posts_with_one_key_make_one_payment() {
    let mut s = Stack::start().await;
    let acct = s.open_account("eager-1", 100_000).await;
    let product = s.product(1).await;
    let res = s.reserve(product, "eager-1").await;
    // A member holds one live reservation per product: the second is of another.
    let other_product = s.product(1).await;
    let other = s.reserve(other_product, "eager-1").await;
    // A hundred posts at once from one member: above the per-member rate, which this
    // test is not about.
    let mut config = s.config();
    config.member_rate.burst = std::num::NonZeroU32::new(1_000).expect("non-zero");
    let o = s.orchestrator(config, Hooks::default()).await;

    let mut tasks = Vec::new();
    for _ in 0..100 {
        let client = o.buyer("eager-1");
        tasks.push(tokio::spawn(async move {
            client.pay("same-key", &pay_request(res, acct)).await
        }));
    }
    let mut answers = Vec::new();
    let mut in_progress = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(a) => answers.push(a),
            Err(CallError::Rejected { status: 409, body }) => {
                assert_eq!(body.code, "IDEMPOTENCY_KEY_IN_PROGRESS");
                in_progress += 1;
            }
            Err(e) => panic!("unexpected answer: {e}"),
        }
    }
    assert!(!answers.is_empty());
    let first = &answers[0];
    for a in &answers {
        assert_eq!(
            (a.status, &a.payment),
            (first.status, &first.payment),
            "every answer identical"
        );
    }
    assert_eq!(
        answers.iter().filter(|a| !a.replayed).count(),
        1,
        "one original answer, the rest replays"
    );
    println!(
        "100 concurrent: {} answers ({} replays), {in_progress} in-progress 409s",
        answers.len(),
        answers.len() - 1
    );

    let payments = s.count_of(r#"payment_service.payments"#).await;
    assert_eq!(payments, 1, "one payment");
    let id = first.payment.id;
    assert_eq!(s.settled(id).await, "COMPLETED");
    assert_eq!(s.applied_debits(id).await, 1, "one debit");
    let debits = s
        .count_of(r#"account_service.transactions WHERE kind = 'DEBIT'"#)
        .await;
    assert_eq!(debits, 1);

    // The same key with a different body is refused, and creates nothing.
    let reused = o.pay("eager-1", "same-key", other, acct).await;
    assert!(
        matches!(&reused, Err(CallError::Rejected { status: 422, body }) if body.code == "IDEMPOTENCY_KEY_REUSED"),
        "{reused:?}"
    );
    let payments = s.count_of(r#"payment_service.payments"#).await;
    assert_eq!(payments, 1);
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_requests_get_codes_and_change_nothing() {
    let mut s = Stack::start().await;
    let [(acct, res), (other_acct, others_res)] =
        s.two_buyers_with_reservations(["m-1", "m-2"], 3).await;
    let o = s.orchestrator(s.config(), Hooks::default()).await;
    let http = reqwest::Client::new();
    let post = |key: Option<&str>, body: String| {
        let mut r = http
            .post(format!("{}/v1/payments", o.url))
            .bearer_auth(buyer_token("m-1"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(k) = key {
            r = r.header("idempotency-key", k);
        }
        r.send()
    };
    let code = |r: reqwest::Response| async move {
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.expect("json error body");
        (status, body["code"].as_str().unwrap_or_default().to_owned())
    };
    let body = serde_json::to_string(&pay_request(res, acct)).expect("json");
    assert_eq!(
        code(post(None, body.clone()).await.expect("send")).await,
        (400, "IDEMPOTENCY_KEY_MISSING".into())
    );
    assert_eq!(
        code(post(Some("has space"), body.clone()).await.expect("send")).await,
        (400, "IDEMPOTENCY_KEY_INVALID".into())
    );
    assert_eq!(
        code(post(Some("k"), "{".into()).await.expect("send")).await,
        (400, "MALFORMED_JSON".into())
    );
    let amount_smuggled = format!(r#"{{"reservation_id":"{res}","account_id":{acct},"amount":1}}"#);
    assert_eq!(
        code(post(Some("k"), amount_smuggled).await.expect("send"))
            .await
            .0,
        422
    );
    let others = serde_json::to_string(&pay_request(others_res, acct)).expect("json");
    assert_eq!(
        code(post(Some("k2"), others).await.expect("send")).await,
        (404, "RESERVATION_NOT_FOUND".into())
    );
    let wrong_account = serde_json::to_string(&pay_request(res, other_acct)).expect("json");
    assert_eq!(
        code(post(Some("k3"), wrong_account.clone()).await.expect("send")).await,
        (404, "ACCOUNT_NOT_FOUND".into())
    );
    // A reservation that names no held-on account (made before funds holds) has its
    // account checked with the account service instead: refused the same, and paid
    // from the right one below.
    let unnamed = sqlx::query(
        r#"UPDATE order_service.reservations SET account_id = NULL WHERE id = $1 AND account_id = $2"#,
    )
    .bind(res)
    .bind(acct)
    .execute(&s.admin)
    .await
    .expect("unname the held-on account");
    assert_eq!(
        unnamed.rows_affected(),
        1,
        "the reservation named its account"
    );
    assert_eq!(
        code(post(Some("k6"), wrong_account).await.expect("send")).await,
        (404, "ACCOUNT_NOT_FOUND".into())
    );
    let missing = serde_json::to_string(&pay_request(Uuid::new_v4(), acct)).expect("json");
    assert_eq!(
        code(post(Some("k4"), missing).await.expect("send")).await,
        (404, "RESERVATION_NOT_FOUND".into())
    );

    let payments = s.count_of(r#"payment_service.payments"#).await;
    let keys = s.count_of(r#"payment_service.idempotency_keys"#).await;
    assert_eq!(
        (payments, keys),
        (0, 0),
        "refused requests leave nothing behind"
    );

    // A validation failure released its key: the same key now pays the right thing.
    let ok = o.pay("m-1", "k3", res, acct).await.expect("pay");
    assert_eq!(s.settled(ok.payment.id).await, "COMPLETED");
    // A second payment for the same (now confirmed) reservation is refused.
    let twice = o.pay("m-1", "k5", res, acct).await;
    assert!(
        matches!(&twice, Err(CallError::Rejected { status: 409, body }) if body.code == "RESERVATION_NOT_PAYABLE"),
        "{twice:?}"
    );
    // Operator endpoints refuse buyer tokens.
    let listed = http
        .get(format!("{}/v1/payments", o.url))
        .bearer_auth(buyer_token("m-1"))
        .send()
        .await
        .expect("send");
    assert_eq!(listed.status().as_u16(), 403);
    let bad_filter = http
        .get(format!("{}/v1/payments?state=NOPE", o.url))
        .bearer_auth(paysaga_common::testkit::service_token(
            "operator",
            Audience::Orchestrator,
        ))
        .send()
        .await
        .expect("send");
    assert_eq!(code(bad_filter).await, (400, "INVALID_QUERY".into()));
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operator_refund_cancels_the_order_and_credits_the_buyer() {
    let mut s = Stack::start().await;
    let [(acct, res), (other, res2)] = s.two_buyers_with_reservations(["r-1", "r-2"], 2).await;
    s.release_hold(res2).await;
    let o = s.orchestrator(s.config(), Hooks::default()).await;
    let id = o.paid("r-1", "k", res, acct).await;
    assert_eq!(s.settled(id).await, "COMPLETED");
    let failed = o.paid("r-2", "k", res2, other).await;
    assert_eq!(s.settled(failed).await, "FAILED");

    let refunded = o.operator().refund(id).await.expect("refund").body;
    let refunded = refunded.refunded().expect("below the four-eyes amount");
    assert!(matches!(
        refunded.payment.state.as_str(),
        "REFUND_PROCESSING" | "REFUNDED"
    ));
    assert_eq!(s.settled(id).await, "REFUNDED");
    assert_eq!(s.balance(acct).await, 100_000);
    assert_eq!(s.unit_state(res).await, "AVAILABLE");
    assert_eq!(s.reservation_state(res).await, "CANCELLED");
    let again = o.operator().refund(id).await.expect("refund again").body;
    assert_eq!(
        again.refunded().map(|p| p.payment.state.as_str()),
        Some("REFUNDED")
    );
    let refused = o.operator().refund(failed).await;
    assert!(
        matches!(&refused, Err(CallError::Rejected { status: 409, body }) if body.code == "PAYMENT_NOT_REFUNDABLE")
    );
    let tl = o.timeline(id).await;
    let undone = [
        ("CANCEL_ORDER", "OPERATOR"),
        ("CANCEL_ORDER", "SUCCEEDED"),
        ("REFUND", "SUCCEEDED"),
    ];
    assert_eq!(steps(&tl), [&COMPLETED[..], &undone].concat());
    let credits = s
        .count_of(r#"account_service.transactions WHERE kind = 'CREDIT'"#)
        .await;
    assert_eq!(credits, 1);
    s.check_money().await;
}

/// Inserts a payment as an instance that crashed right after creating it leaves it.
async fn insert_stuck(
    s: &Stack,
    reservation: Uuid,
    account: i64,
    member: &str,
    attempts: i32,
) -> Uuid {
    let id = Uuid::now_v7();
    sqlx::query(
        r#"
        INSERT INTO payment_service.payments
            (id, member_id, account_id, reservation_id, amount, state, pending_action, attempts, next_attempt_at,
             lease_owner, lease_until)
        VALUES ($1, $2, $3, $4, $5, 'PROCESSING', 'DEBIT', $6, now(), $7, now() - INTERVAL '1 second')
        "#,
    )
    .bind(id)
    .bind(member)
    .bind(account)
    .bind(reservation)
    .bind(PRICE)
    .bind(attempts)
    .bind(Uuid::new_v4())
    .execute(&s.admin)
    .await
    .expect("insert stuck payment");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exhausted_attempts_flag_the_payment_and_an_operator_resumes_it() {
    let (s, acct, res) = Stack::with_buyer("flag-1").await;
    // The account service is unreachable for this instance.
    let mut config = s.config();
    config.account_url = "http://127.0.0.1:9".into();
    let max = workflows::RetryPolicy::for_action(Action::Debit).max_attempts as i32;
    s.migrate_payments().await;
    let id = insert_stuck(&s, res, acct, "flag-1", max - 1).await;
    let mut cut_off = s.orchestrator(config, Hooks::default()).await;
    let page = loop {
        let page = cut_off
            .operator()
            .list("needs_attention=true&limit=500")
            .await
            .expect("list")
            .body
            .payments;
        if page.iter().any(|p| p.payment.id == id) {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let flagged = page
        .into_iter()
        .find(|p| p.payment.id == id)
        .expect("listed");
    assert!(flagged.needs_attention);
    assert_eq!(flagged.attempts, max);
    assert_eq!(flagged.payment.state, "PROCESSING");
    assert!(flagged.last_error.is_some());
    assert_eq!(
        flagged.next_attempt_at, None,
        "not retried on its own any more, never dropped"
    );
    cut_off.kill();

    let healthy = s.orchestrator(s.config(), Hooks::default()).await;
    let resumed = healthy.operator().resume(id).await.expect("resume").body;
    assert!(!resumed.needs_attention);
    assert_eq!(s.settled(id).await, "COMPLETED");
    assert_eq!(s.applied_debits(id).await, 1);
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_recover_500_stuck_payments_each_exactly_once() {
    const BUYERS: usize = 100;
    const PER_BUYER: usize = 5;
    let mut s = Stack::start().await;
    // A member holds one live reservation per product: each of a buyer's units is of
    // another product.
    let mut products = Vec::new();
    for _ in 0..PER_BUYER {
        products.push(s.product(BUYERS as i64).await);
    }
    s.migrate_payments().await;
    let mut ids = Vec::new();
    for b in 0..BUYERS {
        let member = format!("bulk-{b}");
        let acct = s.open_account(&member, PRICE * PER_BUYER as i64).await;
        for (k, &product) in products.iter().enumerate() {
            let res = s.reserve(product, &member).await;
            // Four buyers in five lose the hold of their last unit: that debit fails.
            if b % 5 != 0 && k == PER_BUYER - 1 {
                s.release_hold(res).await;
            }
            ids.push(insert_stuck(&s, res, acct, &member, 0).await);
        }
    }

    let mut config = s.config();
    config.recovery_batch = 20;
    config.recovery_concurrency = 8;
    let a = s.orchestrator(config.clone(), Hooks::default()).await;
    let b = s.orchestrator(config, Hooks::default()).await;
    for id in &ids {
        s.settled(*id).await;
    }

    let states: Vec<(String, i64)> = sqlx::query_as(
        r#"SELECT state, COUNT(*) FROM payment_service.payments GROUP BY state ORDER BY state"#,
    )
    .fetch_all(&s.admin)
    .await
    .expect("states");
    let expected_failed = (BUYERS - BUYERS / 5) as i64;
    assert_eq!(
        states,
        vec![
            (
                "COMPLETED".to_string(),
                (BUYERS * PER_BUYER) as i64 - expected_failed
            ),
            ("FAILED".to_string(), expected_failed)
        ]
    );
    // Each payment's steps: one chain (seq 1..n), each action decided exactly once.
    let bad: Vec<(Uuid, String)> = sqlx::query_as(
        r#"
        SELECT p.id, string_agg(s.action || ':' || s.outcome, ',' ORDER BY s.seq)
        FROM payment_service.payments p JOIN payment_service.payment_steps s ON s.payment_id = p.id
        GROUP BY p.id, p.version
        HAVING COUNT(*) <> p.version OR MAX(s.seq) <> p.version
            OR string_agg(s.action || ':' || s.outcome, ',' ORDER BY s.seq) NOT IN (
                'DEBIT:SUCCEEDED,CONFIRM:SUCCEEDED,COMPLETE:SUCCEEDED',
                'DEBIT:REJECTED,CANCEL_RESERVATION:SUCCEEDED')
        "#,
    )
    .fetch_all(&s.admin)
    .await
    .expect("step chains");
    assert!(
        bad.is_empty(),
        "payments driven other than exactly once: {:?}",
        &bad[..bad.len().min(5)]
    );
    let debits = s
        .count_of(r#"account_service.transactions WHERE kind = 'DEBIT'"#)
        .await;
    assert_eq!(
        debits,
        (BUYERS * PER_BUYER) as i64,
        "one debit decision per payment, applied or declined"
    );
    let drivers: Vec<(Uuid, i64)> = sqlx::query_as(
        r#"SELECT driver, COUNT(DISTINCT payment_id) FROM payment_service.payment_steps GROUP BY driver"#,
    )
    .fetch_all(&s.admin)
    .await
    .expect("drivers");
    println!(
        "payments driven per instance: {:?}",
        drivers.iter().map(|d| d.1).collect::<Vec<_>>()
    );
    let sold = s
        .count_of(r#"order_service.product_stock WHERE state = 'SOLD'"#)
        .await;
    assert_eq!(sold, (BUYERS * PER_BUYER) as i64 - expected_failed);
    drop((a, b));
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_owners_cannot_write_and_expired_keys_are_purged() {
    use orchestrator::{
        idempotency::{self, Begin, IdempotencyKey, Scope},
        store::{self, Move, StepRecord},
    };
    use workflows::{Outcome, Position};

    let s = Stack::start().await;
    s.migrate_payments().await;
    let pool = paysaga_common::db::connect(&s.db.role_url("payment_app"), orchestrator::SCHEMA, 4)
        .await
        .expect("connect");
    let scope = Scope {
        member: "m-1".into(),
        operation: "create_payment",
        key: IdempotencyKey::parse("k-stale").expect("key"),
    };
    let long = Duration::from_secs(60);
    let Begin::Owned { token: first, .. } = idempotency::begin(&pool, &scope, "fp", long, 24)
        .await
        .expect("begin")
    else {
        panic!("a new key is owned");
    };
    assert!(matches!(
        idempotency::begin(&pool, &scope, "fp", long, 24).await,
        Err(orchestrator::Error::IdempotencyInProgress { retry_after_secs }) if retry_after_secs >= 1
    ));
    assert!(matches!(
        idempotency::begin(&pool, &scope, "other", long, 24).await,
        Err(orchestrator::Error::IdempotencyKeyReused)
    ));
    // The first owner "crashes": its lease runs out and a retry takes over.
    sqlx::query(
        r#"UPDATE payment_service.idempotency_keys SET lease_until = now() - INTERVAL '1 second'"#,
    )
    .execute(&s.admin)
    .await
    .expect("expire");
    let Begin::Owned {
        token: second,
        payment_id,
    } = idempotency::begin(&pool, &scope, "fp", long, 24)
        .await
        .expect("take over")
    else {
        panic!("an expired lease is taken over");
    };
    assert_ne!(first, second);
    assert_eq!(payment_id, None);
    // A payment is created only together with its key's link, by the key's owner: the
    // stale owner's insert writes nothing at all.
    let new_payment = |reservation_id| store::NewPayment {
        id: Uuid::now_v7(),
        member_id: "m-1".into(),
        account_id: 1,
        reservation_id,
        amount: 12_900,
        product_id: None,
        traceparent: None,
    };
    let stale = new_payment(Uuid::new_v4());
    assert!(
        store::insert_linked_payment(&pool, &stale, Uuid::new_v4(), long, &scope, first)
            .await
            .expect("stale insert")
            .is_none(),
        "stale owner creates no payment"
    );
    let fresh = new_payment(Uuid::new_v4());
    let created = store::insert_linked_payment(&pool, &fresh, Uuid::new_v4(), long, &scope, second)
        .await
        .expect("owner insert")
        .expect("owner creates the payment");
    let (payments, linked): (i64, Option<Uuid>) = sqlx::query_as(
        r#"SELECT (SELECT COUNT(*) FROM payment_service.payments),
                  (SELECT payment_id FROM payment_service.idempotency_keys WHERE idem_key = 'k-stale')"#,
    )
    .fetch_one(&s.admin)
    .await
    .expect("read back");
    assert_eq!((payments, linked), (1, Some(created.id)));
    assert_eq!(created.id, fresh.id);
    assert!(
        !idempotency::complete(&pool, &scope, first, 201, "{\"stale\":true}")
            .await
            .expect("stale"),
        "stale owner refused"
    );
    assert!(
        idempotency::complete(&pool, &scope, second, 201, "{\"fresh\":true}")
            .await
            .expect("owner")
    );
    match idempotency::begin(&pool, &scope, "fp", long, 24)
        .await
        .expect("replay")
    {
        Begin::Replay { status, body } => {
            assert_eq!((status, body.as_str()), (201, "{\"fresh\":true}"))
        }
        other => panic!("expected a replay, got {other:?}"),
    }

    // The same for a payment's lease: the stale driver's step is refused, nothing written.
    let driver_a = Uuid::new_v4();
    let driver_b = Uuid::new_v4();
    let id = insert_stuck(&s, Uuid::new_v4(), 1, "m-1", 0).await;
    sqlx::query(r#"UPDATE payment_service.payments SET lease_owner = $2 WHERE id = $1"#)
        .bind(id)
        .bind(driver_a)
        .execute(&s.admin)
        .await
        .expect("lease to a");
    let row_a = store::load(&pool, id).await.expect("load").expect("row");
    let row_b = store::claim_one(&pool, id, driver_b, long)
        .await
        .expect("claim")
        .expect("expired lease is claimable");
    let step = StepRecord {
        action: Action::Debit,
        operation_key: Action::Debit.operation_key(id),
        outcome: Some(Outcome::Succeeded),
        downstream_status: Some(201),
        latency: Duration::from_millis(3),
        error: None,
    };
    let to =
        Position::new(workflows::State::AccountDebited, Some(Action::Confirm)).expect("position");
    let mv = Move {
        to,
        attempts: 0,
        next_attempt_in: Some(Duration::ZERO),
        needs_attention: false,
        keep_lease: true,
        failure_code: None,
    };
    // The same step, as `driver` holding `row`: the moved row, `None` when refused.
    let record = async |row: &store::PaymentRow, driver: Uuid| {
        store::record_step(&pool, row, driver, long, &step, &mv)
            .await
            .expect("cas")
    };
    assert!(
        record(&row_a, driver_a).await.is_none(),
        "stale driver refused"
    );
    let moved = record(&row_b, driver_b).await.expect("owner moves it");
    assert_eq!(
        (moved.state.as_str(), moved.version),
        ("ACCOUNT_DEBITED", 1)
    );
    assert!(
        record(&row_b, driver_b).await.is_none(),
        "same version twice refused"
    );
    let steps: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM payment_service.payment_steps WHERE payment_id = $1"#,
    )
    .bind(id)
    .fetch_one(&s.admin)
    .await
    .expect("steps");
    assert_eq!(steps, 1);

    // Retention: an expired record is purged, a live one kept.
    let keep = Scope {
        key: IdempotencyKey::parse("k-live").expect("key"),
        ..scope.clone()
    };
    assert!(matches!(
        idempotency::begin(&pool, &keep, "fp", long, 24).await,
        Ok(Begin::Owned { .. })
    ));
    sqlx::query(r#"UPDATE payment_service.idempotency_keys SET expires_at = now() - INTERVAL '1 second' WHERE idem_key = 'k-stale'"#)
        .execute(&s.admin)
        .await
        .expect("age");
    assert_eq!(
        idempotency::purge_expired(&pool, 1000)
            .await
            .expect("purge"),
        1
    );
    let left: Vec<String> =
        sqlx::query_scalar(r#"SELECT idem_key FROM payment_service.idempotency_keys"#)
            .fetch_all(&s.admin)
            .await
            .expect("keys");
    assert_eq!(left, vec!["k-live".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_accepts_exactly_the_positions_the_machine_reaches() {
    let s = Stack::start().await;
    s.migrate_payments().await;
    let id = insert_stuck(&s, Uuid::new_v4(), 1, "m-1", 0).await;
    let pendings: Vec<Option<Action>> = std::iter::once(None)
        .chain(Action::ALL.into_iter().map(Some))
        .collect();
    for state in workflows::State::ALL {
        for pending in &pendings {
            let mut tx = s.admin.begin().await.expect("tx");
            let stored = sqlx::query(
                r#"UPDATE payment_service.payments
                   SET state = $2, pending_action = $3,
                       next_attempt_at = CASE WHEN $3::TEXT IS NULL THEN NULL ELSE next_attempt_at END
                   WHERE id = $1"#,
            )
            .bind(id)
            .bind(state.as_str())
            .bind(pending.map(Action::as_str))
            .execute(&mut *tx)
            .await;
            let reachable = workflows::Position::new(state, *pending).is_ok();
            assert_eq!(
                stored.is_ok(),
                reachable,
                "{state} owing {pending:?}: stored {stored:?}"
            );
            tx.rollback().await.expect("rollback");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buyer_who_hangs_up_gets_the_stored_answer_on_retry() {
    let (s, acct, res) = Stack::with_buyer("impatient-1").await;
    // The debit is slow, so the first request is still running when its buyer gives up.
    let (_proxy, config) = s.via_slow_debit(Duration::from_millis(1500)).await;
    let o = s.orchestrator(config, Hooks::default()).await;

    let impatient = paysaga_contracts::orchestrator::client::OrchestratorClient::new(
        &o.url,
        buyer_token("impatient-1"),
        Duration::from_millis(100),
    );
    let first = impatient.pay("k-hangup", &pay_request(res, acct)).await;
    assert!(
        matches!(first, Err(CallError::Unknown { .. })),
        "the buyer hung up: {first:?}"
    );
    let patient = o.buyer("impatient-1");
    let answer = loop {
        match patient.pay("k-hangup", &pay_request(res, acct)).await {
            Err(CallError::Rejected { status: 409, body })
                if body.code == "IDEMPOTENCY_KEY_IN_PROGRESS" =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => break other.expect("an answer"),
        }
    };
    assert!(
        answer.replayed,
        "the abandoned request still completed its key; the retry is its replay"
    );
    assert_eq!(s.settled(answer.payment.id).await, "COMPLETED");
    assert_eq!(s.applied_debits(answer.payment.id).await, 1);
    s.check_money().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_service_dead_after_the_debit_then_back_completes_the_payment() {
    let (s, acct, res) = Stack::with_buyer("outage-1").await;
    let (proxy, config) = s.via_order_proxy().await;
    let proxy = Arc::new(proxy);
    // The order service goes dark right after the debit commits.
    let cut = after_debit(proxy.clone(), |link| async move { link.cut() });
    let o = s.orchestrator(config, cut).await;

    let answer = o.pay("outage-1", "k1", res, acct).await.expect("pay");
    let id = answer.payment.id;
    // Wait until the confirm has failed to get an answer at least twice.
    loop {
        let (state, attempts): (String, i32) = s.payment_columns("state, attempts", id).await;
        assert_eq!(
            state, "ACCOUNT_DEBITED",
            "an unreachable order service is never a failure"
        );
        if attempts >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.heal();
    assert_eq!(s.settled(id).await, "COMPLETED");
    assert_eq!(s.applied_debits(id).await, 1);
    assert_eq!(s.unit_state(res).await, "SOLD");
    let tl = o.timeline(id).await;
    let confirms: Vec<&str> = tl
        .steps
        .iter()
        .filter(|st| st.action == "CONFIRM")
        .map(|st| st.outcome.as_str())
        .collect();
    assert!(
        confirms.len() >= 3
            && confirms[..confirms.len() - 1]
                .iter()
                .all(|o| *o == "UNKNOWN"),
        "{confirms:?}"
    );
    assert_eq!(confirms.last(), Some(&"SUCCEEDED"));
    s.check_money().await;
}

/// A new request is checked before its key is claimed, then key and payment are made in
/// one group commit: many keys racing for one reservation still make one payment and
/// one debit, every loser is refused with a code, and no loser's key is left behind
/// (a retry with it is answered again, not told to wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_racing_for_one_reservation_make_one_payment_and_leave_no_key_behind() {
    let (s, acct, res) = Stack::with_buyer("racer-1").await;
    let o = s.orchestrator(s.config(), Hooks::default()).await;

    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let client = o.buyer("racer-1");
            tokio::spawn(async move {
                let key = format!("racer-key-{i}");
                (key.clone(), client.pay(&key, &pay_request(res, acct)).await)
            })
        })
        .collect();
    let mut paid = Vec::new();
    let mut refused = Vec::new();
    for t in tasks {
        match t.await.expect("task") {
            (key, Ok(a)) => paid.push((key, a)),
            (key, Err(CallError::Rejected { status: 409, body })) => {
                assert!(
                    matches!(
                        body.code.as_str(),
                        "RESERVATION_ALREADY_PAID" | "RESERVATION_NOT_PAYABLE"
                    ),
                    "unexpected refusal {}",
                    body.code
                );
                refused.push((key, body.code));
            }
            (_, Err(e)) => panic!("unexpected answer: {e}"),
        }
    }
    assert_eq!(paid.len(), 1, "one request pays");
    assert_eq!(refused.len(), 19);
    let (winning_key, first) = &paid[0];
    let id = first.payment.id;
    assert_eq!(s.settled(id).await, "COMPLETED");

    let (payments, unlinked): (i64, i64) = sqlx::query_as(
        r#"SELECT (SELECT COUNT(*) FROM payment_service.payments WHERE reservation_id = $1),
                  (SELECT COUNT(*) FROM payment_service.idempotency_keys WHERE payment_id IS NULL)"#,
    )
    .bind(res)
    .fetch_one(&s.admin)
    .await
    .expect("counts");
    assert_eq!(
        (payments, unlinked),
        (1, 0),
        "one payment, no key left behind"
    );
    assert_eq!(s.applied_debits(id).await, 1);
    assert_eq!(s.balance(acct).await, 100_000 - PRICE);
    assert_eq!(s.unit_state(res).await, "SOLD");

    // A loser's retry is refused again, not told to wait for a key nobody holds.
    let (key, _) = &refused[0];
    let again = o.pay("racer-1", key, res, acct).await;
    assert!(
        matches!(&again, Err(CallError::Rejected { status: 409, body })
            if matches!(body.code.as_str(), "RESERVATION_ALREADY_PAID" | "RESERVATION_NOT_PAYABLE")),
        "retry of a refused key: {again:?}"
    );
    // The winner's retry is its stored answer.
    let winner = o
        .pay("racer-1", winning_key, res, acct)
        .await
        .expect("replay");
    assert!(winner.replayed);
    assert_eq!(winner.payment.id, id);
    s.check_money().await;
}

/// `action`'s steps in the timeline, after checking that one of its calls timed out and
/// none was rejected: an unknown outcome is never a failure.
fn timed_out_never_rejected<'a>(tl: &'a PaymentTimeline, action: &str) -> Vec<&'a Step> {
    let steps: Vec<&Step> = tl.steps.iter().filter(|st| st.action == action).collect();
    assert!(
        steps
            .iter()
            .any(|st| st.error.as_deref().is_some_and(|e| e.contains("timed out"))),
        "the {action} call timed out: {steps:?}"
    );
    assert!(
        steps.iter().all(|st| st.outcome != "REJECTED"),
        "an unknown {action} outcome is never a rejection"
    );
    steps
}
