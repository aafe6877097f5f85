//! Each product's answered payments over its drop, in time buckets, for the console's charts.

use std::collections::BTreeMap;

use paysaga_console::{Bucket, DropSeries};
use sqlx::{PgPool, Row};

use crate::error::Result;

/// At most this many buckets per product: the bucket grows with the drop's length.
pub const MAX_BUCKETS: i64 = 60;

/// Per product, from the creation of its first answered payment (COMPLETED or FAILED),
/// the payments answered in each bucket (their last update is the move into that state):
/// how many completed, and the creation-to-answer latency's p50 and p95; with the
/// whole drop's p50 and p95. One scan of the answered payments, grouped twice.
pub async fn drop_series(pool: &PgPool) -> Result<BTreeMap<i64, DropSeries>> {
    let rows = sqlx::query(
        r#"
        WITH answered AS (
            SELECT product_id, state, created_at, updated_at,
                   (EXTRACT(EPOCH FROM updated_at - created_at) * 1000)::FLOAT8 AS ms
            FROM payments
            WHERE product_id IS NOT NULL AND state IN ('COMPLETED', 'FAILED')
        ),
        drops AS (
            SELECT product_id, MIN(created_at) AS start,
                   GREATEST(1, CEIL(EXTRACT(EPOCH FROM MAX(updated_at) - MIN(created_at)) / $1))::BIGINT AS width
            FROM answered
            GROUP BY product_id
        ),
        placed AS (
            SELECT a.product_id, a.state, a.ms, d.width,
                   FLOOR(EXTRACT(EPOCH FROM a.updated_at - d.start) / d.width)::BIGINT AS bucket
            FROM answered a JOIN drops d USING (product_id)
        )
        SELECT product_id, width, bucket,
               COUNT(*) FILTER (WHERE state = 'COMPLETED') AS completed,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50,
               percentile_cont(0.95) WITHIN GROUP (ORDER BY ms) AS p95
        FROM placed
        GROUP BY GROUPING SETS ((product_id, width, bucket), (product_id))
        ORDER BY product_id, bucket NULLS FIRST
        "#,
    )
    .bind(MAX_BUCKETS)
    .fetch_all(pool)
    .await?;
    let mut out: BTreeMap<i64, DropSeries> = BTreeMap::new();
    for r in &rows {
        let product: i64 = r.try_get("product_id")?;
        let s = out.entry(product).or_default();
        let (p50, p95): (Option<f64>, Option<f64>) = (r.try_get("p50")?, r.try_get("p95")?);
        let Some(bucket) = r.try_get::<Option<i64>, _>("bucket")? else {
            // The whole drop's row.
            (s.p50_ms, s.p95_ms) = (p50, p95);
            continue;
        };
        s.bucket_secs = r.try_get("width")?;
        // Empty buckets between answered ones, so the series is evenly spaced.
        while (s.buckets.len() as i64) < bucket {
            let offset_secs = s.buckets.len() as i64 * s.bucket_secs;
            s.buckets.push(Bucket {
                offset_secs,
                ..Bucket::default()
            });
        }
        s.buckets.push(Bucket {
            offset_secs: bucket * s.bucket_secs,
            completed: r.try_get("completed")?,
            p50_ms: p50,
            p95_ms: p95,
        });
    }
    Ok(out)
}
