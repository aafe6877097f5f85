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
    let committed_unanswered: i64 = sqlx::query_scalar(
        r#"
        SELECT COUNT(DISTINCT s.payment_id)
        FROM payment_service.payment_steps AS s
        JOIN account_service.transactions AS t
          ON t.operation_key = s.operation_key AND t.kind = 'DEBIT' AND t.status = 'APPLIED'
        WHERE s.action = 'DEBIT' AND (s.outcome = 'UNKNOWN' OR s.settled_by_query)
          AND t.created_at < s.created_at
        "#,
    )
    .fetch_one(pool)
    .await
    .context("evidence query failed: debits committed whose answer was lost")?;
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

/// The gate's `/metrics` page.
pub async fn gate_metrics(http: &reqwest::Client, gate_url: &str) -> anyhow::Result<String> {
    http.get(format!("{gate_url}/metrics"))
        .send()
        .await
        .context("reading the gate's metrics")?
        .text()
        .await
        .context("reading the gate's metrics")
}

#[cfg(test)]
mod tests {
    use super::metric;

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
}
