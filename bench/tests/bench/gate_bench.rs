//! The gate's in-process benchmark measures admissions, not refusals: its products are
//! listed in the gate's catalogue, so every issuance row is passes issued, every
//! sold-out row is `SOLD_OUT`, and the drop row sells exactly its units.

use paysaga_bench::benches::gate::{self, BenchConfig, Only};
use paysaga_common::testkit::TestRedis;

#[tokio::test]
async fn every_row_measures_the_answer_it_is_named_for() {
    let redis = TestRedis::new();
    let cfg = BenchConfig {
        redis_url: redis.url.clone(),
        connections: 8,
        requests: 200,
        drop_units: 5,
        drop_buyers: 60,
        drop_connections: 8,
        rounds: 1,
        only: Only::All,
        progress: false,
    };
    let report = gate::run(&cfg).await.unwrap();
    for row in report.rows() {
        assert_eq!(row.errors(), 0, "{}: {:?}", row.name, row.outcomes);
    }
    assert_eq!(
        report.issue.count("http_201"),
        200,
        "{:?}",
        report.issue.outcomes
    );
    assert_eq!(
        report.sold_out.count("sold_out"),
        200,
        "{:?}",
        report.sold_out.outcomes
    );
    assert_eq!(
        report.drop.count("http_201"),
        5,
        "{:?}",
        report.drop.outcomes
    );
    assert_eq!(
        report.drop.count("sold_out"),
        55,
        "{:?}",
        report.drop.outcomes
    );
    assert!(report.redis_bytes_per_pass > 0.0);
}
