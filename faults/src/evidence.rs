//! Evidence that a fault hit work in progress, read from the step log, the ledger and the
//! gate's metrics: a scenario that passes without exercising its fault proves nothing.

use anyhow::Context;
use sqlx::PgPool;

/// Step-log counts every scenario reports. A call with an unknown outcome is a step
/// recorded UNKNOWN, or one whose status query settled it at once: the driver records
/// those with the query's outcome and `settled_by_query` set.
pub async fn steps(pool: &PgPool) -> anyhow::Result<Vec<(String, i64)>> {
    let count = |sql: &'static str| async move {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(pool)
            .await
            .with_context(|| format!("evidence query failed: {sql}"))
    };
    let unknown_calls = |action: &'static str| async move {
        sqlx::query_scalar::<_, i64>(
            r#"SELECT COUNT(*) FROM payment_service.payment_steps
               WHERE action = $1 AND (outcome = 'UNKNOWN' OR settled_by_query)"#,
        )
        .bind(action)
        .fetch_one(pool)
        .await
        .with_context(|| format!("evidence query failed: unknown {action} calls"))
    };
    // The debit was in the ledger before the saga recorded not knowing: it committed,
    // and the answer was lost or late.
    let committed_unanswered = count(
        r#"
        SELECT COUNT(DISTINCT s.payment_id)
        FROM payment_service.payment_steps AS s
        JOIN account_service.transactions AS t
          ON t.operation_key = s.operation_key AND t.kind = 'DEBIT' AND t.status = 'APPLIED'
        WHERE s.action = 'DEBIT' AND (s.outcome = 'UNKNOWN' OR s.settled_by_query)
          AND t.created_at < s.created_at
        "#,
    )
    .await?;
    // The same for confirms: the order was written (its transaction began) before the
    // saga recorded not knowing, so the confirm committed and only its answer was lost;
    // the saga learned it by looking the reservation up.
    let confirms_committed_unanswered = count(
        r#"
        SELECT COUNT(DISTINCT s.payment_id)
        FROM payment_service.payment_steps AS s
        JOIN payment_service.payments AS p ON p.id = s.payment_id
        JOIN order_service.orders AS o ON o.reservation_id = p.reservation_id
        WHERE s.action = 'CONFIRM' AND (s.outcome = 'UNKNOWN' OR s.settled_by_query)
          AND o.created_at < s.created_at
        "#,
    )
    .await?;
    Ok(vec![
        (
            "debit calls with an unknown outcome".into(),
            unknown_calls("DEBIT").await?,
        ),
        (
            "debits committed whose answer was lost".into(),
            committed_unanswered,
        ),
        (
            "confirm calls with an unknown outcome".into(),
            unknown_calls("CONFIRM").await?,
        ),
        (
            "confirms committed whose answer was lost".into(),
            confirms_committed_unanswered,
        ),
        (
            "refund calls with an unknown outcome".into(),
            unknown_calls("REFUND").await?,
        ),
        (
            "payments driven by two instances".into(),
            count(
                r#"
                SELECT COUNT(*) FROM (
                    SELECT payment_id FROM payment_service.payment_steps
                    GROUP BY payment_id HAVING COUNT(DISTINCT driver) > 1
                ) AS taken_over
                "#,
            )
            .await?,
        ),
        (
            "payments refunded".into(),
            count(r#"SELECT COUNT(*) FROM payment_service.payments WHERE state = 'REFUNDED'"#)
                .await?,
        ),
    ])
}

/// What buyers were told, held against what PostgreSQL holds once recovery is over: an
/// answer the database contradicts is a commit lost (or invented) on the way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Acknowledged {
    /// Buyers told COMPLETED.
    pub completed: i64,
    /// ... whose payment is not COMPLETED with its debit applied and its order confirmed.
    pub completed_lost: i64,
    /// Buyers told FAILED or REFUNDED whose payment is in another state.
    pub closed_contradicted: i64,
    /// Reservations a buyer was given (201) that the database does not hold.
    pub reservations_lost: i64,
    /// `Idempotency-Key`s still PROCESSING with every buyer answered and every payment
    /// settled: nothing would ever complete them.
    pub keys_in_progress: i64,
}

impl Acknowledged {
    /// Every broken promise, in words.
    pub fn violations(&self) -> Vec<String> {
        [
            (
                self.completed_lost,
                "buyers told COMPLETED without a COMPLETED, debited and confirmed payment in the database",
            ),
            (
                self.closed_contradicted,
                "buyers told FAILED or REFUNDED whose payment the database holds in another state",
            ),
            (
                self.reservations_lost,
                "reservations acknowledged to buyers missing from the database",
            ),
            (
                self.keys_in_progress,
                "Idempotency-Keys left PROCESSING after every buyer was answered",
            ),
        ]
        .into_iter()
        .filter(|(n, _)| *n != 0)
        .map(|(n, what)| format!("{what}: {n}"))
        .collect()
    }
}

/// Reads [`Acknowledged`] for `attempts` (the drop's buyers, all answered) from `pool`.
pub async fn acknowledged(
    pool: &PgPool,
    attempts: &[paysaga_drop::Attempt],
) -> anyhow::Result<Acknowledged> {
    use paysaga_drop::Outcome;
    let mut told_completed = Vec::new();
    let mut completed_without_id = 0;
    let mut told_closed = Vec::new();
    let mut closed_states = Vec::new();
    for a in attempts {
        let state = match a.outcome {
            Outcome::Completed => "COMPLETED",
            Outcome::Failed { .. } => "FAILED",
            Outcome::Refunded => "REFUNDED",
            _ => continue,
        };
        match (state, a.payment_id) {
            ("COMPLETED", Some(id)) => told_completed.push(id),
            ("COMPLETED", None) => completed_without_id += 1,
            (_, Some(id)) => {
                told_closed.push(id);
                closed_states.push(state.to_owned());
            }
            (_, None) => {}
        }
    }
    let completed_lost = count_over(
        pool,
        r#"
        SELECT COUNT(*)
        FROM UNNEST($1::UUID[]) AS told(id)
        LEFT JOIN payment_service.payments AS p ON p.id = told.id
        WHERE p.id IS NULL
           OR p.state <> 'COMPLETED'
           OR NOT EXISTS (
               SELECT 1 FROM account_service.transactions AS d
               WHERE d.operation_key = 'pay:' || p.id::TEXT || ':debit'
                 AND d.kind = 'DEBIT' AND d.status = 'APPLIED' AND d.amount = p.amount)
           OR NOT EXISTS (
               SELECT 1 FROM order_service.orders AS o
               WHERE o.reservation_id = p.reservation_id AND o.state = 'CONFIRMED')
        "#,
        &told_completed,
        "the payments buyers were told COMPLETED",
    )
    .await?;
    let closed_contradicted: i64 = sqlx::query_scalar(
        r#"
        SELECT COUNT(*)
        FROM UNNEST($1::UUID[], $2::TEXT[]) AS told(id, state)
        LEFT JOIN payment_service.payments AS p ON p.id = told.id
        WHERE p.state IS DISTINCT FROM told.state
        "#,
    )
    .bind(&told_closed)
    .bind(&closed_states)
    .fetch_one(pool)
    .await
    .context("reading the payments buyers were told FAILED or REFUNDED")?;
    let reservations: Vec<uuid::Uuid> = attempts.iter().filter_map(|a| a.reservation_id).collect();
    let reservations_lost = count_over(
        pool,
        r#"
        SELECT COUNT(*)
        FROM UNNEST($1::UUID[]) AS given(id)
        WHERE NOT EXISTS (SELECT 1 FROM order_service.reservations AS r WHERE r.id = given.id)
        "#,
        &reservations,
        "the reservations buyers were given",
    )
    .await?;
    let keys_in_progress: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM payment_service.idempotency_keys WHERE status = 'PROCESSING'"#,
    )
    .fetch_one(pool)
    .await
    .context("reading idempotency keys")?;
    Ok(Acknowledged {
        completed: i64::try_from(told_completed.len()).unwrap_or(i64::MAX) + completed_without_id,
        completed_lost: completed_lost + completed_without_id,
        closed_contradicted,
        reservations_lost,
        keys_in_progress,
    })
}

/// The count `sql` reads with `ids` as its `$1`; `what` it reads names it in an error.
async fn count_over(
    pool: &PgPool,
    sql: &str,
    ids: &[uuid::Uuid],
    what: &str,
) -> anyhow::Result<i64> {
    sqlx::query_scalar(sql)
        .bind(ids)
        .fetch_one(pool)
        .await
        .with_context(|| format!("reading {what}"))
}

/// `name{labels} value` from a Prometheus text page; 0 when absent.
pub fn metric(page: &str, series: &str) -> f64 {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name.trim() == series).then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0.0)
}

/// The Prometheus gauge every `paysaga_common::batch::Coalescer` exports: operations in
/// flushes sent and not yet answered, labelled `batch="<name>"`.
pub const BATCH_IN_FLIGHT: &str = "paysaga_batch_in_flight_ops";

/// Operations in flight in the batcher named `batch` (every batcher when `None`), from a
/// Prometheus text page; `None` when the gauge is absent (a process that batches nothing,
/// or one that has not flushed since it started).
pub fn batch_in_flight(page: &str, batch: Option<&str>) -> Option<f64> {
    let wanted = batch.map(|b| format!("batch=\"{b}\""));
    page.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(BATCH_IN_FLIGHT)?;
            let (labels, value) = rest.rsplit_once(' ')?;
            // Only the gauge itself: `paysaga_batch_in_flight_ops_xyz` is another series.
            if !(labels.is_empty() || labels.starts_with('{')) {
                return None;
            }
            if let Some(w) = &wanted {
                if !labels.contains(w.as_str()) {
                    return None;
                }
            }
            value.trim().parse::<f64>().ok()
        })
        .reduce(|a, b| a + b)
}

/// A service's `/metrics` page, `base_url` being its metrics listener's address
/// (`METRICS_ADDR`; the API's listener serves none).
pub async fn metrics_page(http: &reqwest::Client, base_url: &str) -> anyhow::Result<String> {
    let response = http
        .get(format!("{base_url}/metrics"))
        .send()
        .await
        .with_context(|| format!("reading {base_url}/metrics"))?
        .error_for_status()
        .with_context(|| format!("reading {base_url}/metrics"))?;
    response
        .text()
        .await
        .with_context(|| format!("reading {base_url}/metrics"))
}

#[cfg(test)]
mod tests {
    use super::{batch_in_flight, metric, Acknowledged};

    #[test]
    fn an_answer_the_database_contradicts_is_a_violation() {
        let clean = Acknowledged {
            completed: 38,
            ..Acknowledged::default()
        };
        assert!(clean.violations().is_empty());
        let lost = Acknowledged {
            completed: 38,
            completed_lost: 1,
            keys_in_progress: 2,
            ..Acknowledged::default()
        };
        let v = lost.violations();
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(
            v[0].contains("told COMPLETED") && v[0].ends_with(": 1"),
            "{v:?}"
        );
        assert!(
            v[1].contains("PROCESSING") && v[1].ends_with(": 2"),
            "{v:?}"
        );
    }

    #[test]
    fn metric_reads_a_labelled_series() {
        let page = "# TYPE x counter\ngate_redis_transitions_total{to=\"degraded\"} 2\ngate_redis_degraded 0\n";
        assert_eq!(
            metric(page, "gate_redis_transitions_total{to=\"degraded\"}"),
            2.0
        );
        assert_eq!(metric(page, "gate_redis_degraded"), 0.0);
        assert_eq!(metric(page, "absent"), 0.0);
    }

    #[test]
    fn batch_in_flight_reads_one_batcher_or_all() {
        let page = "# TYPE paysaga_batch_in_flight_ops gauge\n\
                    paysaga_batch_in_flight_ops{batch=\"account\"} 3\n\
                    paysaga_batch_in_flight_ops{batch=\"order\"} 0\n\
                    paysaga_batch_in_flight_ops{batch=\"saga_writes\"} 5\n\
                    paysaga_batch_ops_count{batch=\"account\"} 40\n";
        assert_eq!(batch_in_flight(page, Some("account")), Some(3.0));
        assert_eq!(batch_in_flight(page, Some("order")), Some(0.0));
        assert_eq!(batch_in_flight(page, None), Some(8.0));
        assert_eq!(batch_in_flight(page, Some("absent")), None);
        assert_eq!(batch_in_flight("", None), None);
    }

    /// The page as the services really render it: a real `Coalescer` whose flush is held
    /// open, read through the process's Prometheus recorder, as the injectors read the
    /// orchestrator's `/metrics`.
    #[tokio::test]
    async fn batch_in_flight_sees_a_real_coalescer_mid_flush() {
        use std::time::Duration;

        use paysaga_common::{batch::Coalescer, telemetry::metrics_handle};
        use tokio::sync::{oneshot, Mutex};

        let handle = metrics_handle();
        let (release, released) = oneshot::channel::<()>();
        let released = std::sync::Arc::new(Mutex::new(Some(released)));
        let batcher = Coalescer::new("faults_evidence_test", 8, 1, move |items: Vec<u8>| {
            let released = released.clone();
            async move {
                if let Some(rx) = released.lock().await.take() {
                    let _ = rx.await;
                }
                Ok::<_, String>(items)
            }
        });
        let pending = tokio::spawn({
            let batcher = batcher.clone();
            async move { batcher.submit(7).await }
        });
        let seen = async {
            loop {
                let n = batch_in_flight(&handle.render(), Some("faults_evidence_test"));
                if n.is_some_and(|n| n > 0.0) {
                    return n;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        let seen = tokio::time::timeout(Duration::from_secs(5), seen)
            .await
            .expect("the held flush shows in the gauge");
        assert_eq!(seen, Some(1.0));
        release.send(()).expect("the flush is waiting");
        assert_eq!(pending.await.expect("joined").expect("answered"), 7);
        assert_eq!(
            batch_in_flight(&handle.render(), Some("faults_evidence_test")),
            Some(0.0)
        );
    }
}
