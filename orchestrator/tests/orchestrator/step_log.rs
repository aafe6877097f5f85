//! The step log records how an outcome was learnt: a call whose answer was lost and
//! whose status query settled it is marked `settled_by_query`, in PostgreSQL and in the
//! operator's timeline.

use std::time::Duration;

use crate::support::Stack;
use orchestrator::Hooks;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_debit_answer_settled_by_query_is_marked_in_the_step_log() {
    let (s, acct, res) = Stack::with_buyer("lost-1").await;
    // The debit reaches the ledger and commits; its answer outlasts the call's timeout.
    let (proxy, mut config) = s.via_slow_debit(Duration::from_millis(3000)).await;
    // Generous, so that on a loaded machine the debit still lands and the status query
    // still answers within one call's timeout (the lease must stay 3 x the timeout).
    config.downstream_timeout = Duration::from_millis(1300);
    let o = s.orchestrator(config, Hooks::default()).await;

    let id = o.pay_k1("lost-1", res, acct).await;
    assert_eq!(s.settled(id).await, "COMPLETED");
    assert_eq!(proxy.counts().slowed, 1, "the debit answer was held back");

    let steps: Vec<(String, String, bool)> = sqlx::query_as(
        r#"
        SELECT action, outcome, settled_by_query
        FROM payment_service.payment_steps
        WHERE payment_id = $1
        ORDER BY seq
        "#,
    )
    .bind(id)
    .fetch_all(&s.admin)
    .await
    .expect("steps");
    let owned = |a: &str, o: &str, q: bool| (a.to_owned(), o.to_owned(), q);
    assert_eq!(
        steps,
        vec![
            owned("DEBIT", "SUCCEEDED", true),
            owned("CONFIRM", "SUCCEEDED", false),
            owned("COMPLETE", "SUCCEEDED", false),
        ]
    );

    let timeline = o.timeline(id).await;
    let marked: Vec<_> = timeline
        .steps
        .iter()
        .map(|st| (st.action.as_str(), st.settled_by_query))
        .collect();
    assert_eq!(
        marked,
        vec![("DEBIT", true), ("CONFIRM", false), ("COMPLETE", false)]
    );
    assert_eq!(s.applied_debits(id).await, 1, "exactly one debit");
    s.check_money().await;
}

/// A payment's steps and its idempotency key name it without a foreign key (the
/// statement that moves or creates the payment writes them), so a payment must stay:
/// logged in as `payment_app`, nothing can delete or truncate one, and its steps and
/// key still find it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_role_cannot_delete_a_payment_its_steps_name() {
    let (s, acct, res) = Stack::with_buyer("kept-1").await;
    let o = s.orchestrator(s.config(), Hooks::default()).await;
    let id = o.pay_k1("kept-1", res, acct).await;
    assert_eq!(s.settled(id).await, "COMPLETED");
    let named = format!(
        "payment_service.payment_steps t JOIN payment_service.payments p ON p.id = t.payment_id \
         WHERE p.id = '{id}'"
    );
    let steps = s.count_of(&named).await;
    assert_eq!(steps, 3);
    let keyed = format!("payment_service.idempotency_keys WHERE payment_id = '{id}'");
    assert_eq!(s.count_of(&keyed).await, 1);

    let app = crate::support::payments_pool(&s.db, 1).await;
    let refused = [
        format!("DELETE FROM payment_service.payments WHERE id = '{id}'"),
        "TRUNCATE payment_service.payments CASCADE".to_owned(),
    ];
    paysaga_common::testkit::refused_all(&app, &refused, "42501").await;
    assert_eq!(s.count_of(&named).await, steps);
    assert_eq!(s.count_of(&keyed).await, 1);
}
