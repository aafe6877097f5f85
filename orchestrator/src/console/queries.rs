//! The console's reads of the orchestrator's own schema that the operator API has no route for: payments per product and state, recent rates, a payment's trace context.

use std::collections::BTreeMap;

use sqlx::PgPool;
use uuid::Uuid;

use crate::error::Result;

/// One product's payments (`None`: payments older than the product column).
#[derive(Debug, Default, Clone)]
pub struct ProductPayments {
    pub by_state: BTreeMap<String, i64>,
    pub attention: i64,
    /// Created in the last minute.
    pub created_last_minute: i64,
    /// Reached COMPLETED / FAILED / REFUNDED in the last minute (their last update is
    /// the move into the terminal state).
    pub completed_last_minute: i64,
    pub failed_last_minute: i64,
    pub refunded_last_minute: i64,
}

impl ProductPayments {
    pub fn total(&self) -> i64 {
        self.by_state.values().sum()
    }
}

#[derive(sqlx::FromRow)]
struct Census {
    product_id: Option<i64>,
    state: String,
    n: i64,
    attention: i64,
    created: i64,
    settled: i64,
}

/// Payments per product and state, with the attention count and the last minute's
/// rates. One scan of `payments`: the console polls it every few seconds per open
/// page, which is an operator's load, not a buyer's.
pub async fn payments_by_product(pool: &PgPool) -> Result<BTreeMap<Option<i64>, ProductPayments>> {
    let rows: Vec<Census> = sqlx::query_as(
        r#"
        SELECT product_id, state, COUNT(*) AS n,
               COUNT(*) FILTER (WHERE needs_attention) AS attention,
               COUNT(*) FILTER (WHERE created_at > now() - INTERVAL '60 seconds') AS created,
               COUNT(*) FILTER (WHERE updated_at > now() - INTERVAL '60 seconds') AS settled
        FROM payments
        GROUP BY product_id, state
        "#,
    )
    .fetch_all(pool)
    .await?;
    let mut out: BTreeMap<Option<i64>, ProductPayments> = BTreeMap::new();
    for r in rows {
        let p = out.entry(r.product_id).or_default();
        p.by_state.insert(r.state.clone(), r.n);
        p.attention += r.attention;
        p.created_last_minute += r.created;
        match r.state.as_str() {
            "COMPLETED" => p.completed_last_minute += r.settled,
            "FAILED" => p.failed_last_minute += r.settled,
            "REFUNDED" => p.refunded_last_minute += r.settled,
            _ => {}
        }
    }
    Ok(out)
}

/// The payment's W3C `traceparent`, if it was recorded with one.
pub async fn traceparent(pool: &PgPool, id: Uuid) -> Result<Option<String>> {
    let row: Option<Option<String>> =
        sqlx::query_scalar(r#"SELECT traceparent FROM payments WHERE id = $1"#)
            .bind(id)
            .fetch_optional(pool)
            .await?;
    Ok(row.flatten())
}

/// The trace id of a `traceparent` (`version-traceid-parentid-flags`), if well formed.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    let id = traceparent.split('-').nth(1)?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) && id.bytes().any(|b| b != b'0'))
        .then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_id_is_taken_only_from_a_well_formed_traceparent() {
        assert_eq!(
            trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for bad in [
            "",
            "00",
            "00-xyz-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            assert_eq!(trace_id(bad), None, "{bad}");
        }
    }
}
