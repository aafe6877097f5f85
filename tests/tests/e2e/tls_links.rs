//! A drop with TLS on every link: the services serve `https` only and call each other
//! (and the member service's key set) over it; PostgreSQL and Redis refuse plain
//! connections; every certificate is from the test's own CA, verified with its host
//! name (`TLS_CA_FILE`, `sslmode=verify-full` with `sslrootcert`, `rediss://`). Checked
//! in PostgreSQL: the drop kept its invariants, and every connection the services hold
//! is encrypted; and a plain `http` request to a service gets no answer.

use std::time::Duration;

use paysaga_common::testkit::TestPki;
use paysaga_e2e::{
    invariants, private_postgres::PrivatePostgres, private_redis::PrivateRedis, process::free_port,
    tls_files, Driver, Outcome, ServiceKind, Stack, StackOptions,
};

const UNITS: i64 = 10;
const BUYERS: usize = 30;
const PRICE: i64 = 4_900;

/// Stops the private PostgreSQL and removes its directory when the test ends.
struct Cleanup(PrivatePostgres, std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.0.stop();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drop_over_tls_to_postgres_and_redis() -> anyhow::Result<()> {
    let pki = TestPki::for_names(&["127.0.0.1"]);
    let files = pki.files();
    // This process's clients (the buyers', the operator's, the readiness probes') trust
    // the test's CA as every client here trusts roots beyond the platform's. Set before
    // any client is made; nothing else in this process reads the environment meanwhile.
    std::env::set_var("SSL_CERT_FILE", files.ca());
    let dir =
        std::env::temp_dir().join(format!("paysaga-tls-pg-{}", uuid::Uuid::new_v4().simple()));
    let pg = PrivatePostgres::start_tls(&dir, free_port()?, tls_files(&files)).await?;
    let admin_url = pg.admin_url();
    let _pg = Cleanup(pg, dir);
    let redis = PrivateRedis::start_tls(tls_files(&files)).await?;

    // The servers take TLS only: a plain connection is refused by PostgreSQL's rules.
    let plain = admin_url
        .split_once('?')
        .map(|(base, _)| format!("{base}?sslmode=disable"))
        .expect("the TLS URL has a query");
    let refused = sqlx::PgPool::connect(&plain)
        .await
        .expect_err("a plain PostgreSQL connection was accepted");
    assert!(refused.to_string().contains("no encryption"), "{refused}");

    let stack = Stack::start(
        StackOptions::new("tls_links")
            .quick_loops()
            .database(admin_url)
            .redis(redis.url())
            .tls(tls_files(&files)),
    )
    .await?;
    for kind in ServiceKind::ALL {
        let url = stack.url(kind);
        assert!(url.starts_with("https://127.0.0.1:"), "{url}");
        // Plain HTTP to a TLS listener gets no HTTP answer.
        let plain = reqwest::Client::new()
            .get(format!("{}/readyz", url.replacen("https://", "http://", 1)))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        assert!(
            plain.as_ref().map_or(true, |r| !r.status().is_success()),
            "{kind}: {plain:?}"
        );
    }
    let (endpoints, admin) = stack.operator();
    let product = admin.create_product("tls-10", PRICE, UNITS).await?;
    let buyers = admin
        .open_buyers("tls-buyer", &vec![PRICE * 2; BUYERS], 4)
        .await?;
    admin
        .wait_for_quota(product.id, UNITS, Duration::from_secs(30))
        .await?;
    let attempts = Driver::new(endpoints, Duration::from_secs(10))
        .run_drop(&buyers, product.id, 0, |_| {})
        .await;
    let completed = attempts
        .iter()
        .filter(|a| matches!(a.outcome, Outcome::Completed))
        .count() as i64;
    assert_eq!(completed, UNITS, "every unit sold over the TLS links");

    let pool = stack.admin_pool().await;
    let report = invariants::settled(&pool, Duration::from_secs(60)).await?;
    report.assert_holds();
    assert_eq!(report.units_sold, UNITS);
    assert_eq!(report.money_moved, UNITS * PRICE);

    // Every service's connections to PostgreSQL are encrypted (and there are some).
    let (services, encrypted): (i64, i64) = sqlx::query_as(
        r#"SELECT COUNT(*), COUNT(*) FILTER (WHERE s.ssl)
           FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
           WHERE a.usename LIKE '%\_app'"#,
    )
    .fetch_one(&pool)
    .await?;
    assert!(services > 0, "no service connection seen");
    assert_eq!(encrypted, services, "a service connection without TLS");

    // The gate's quota is in the TLS Redis: the product's keys are there.
    let mut conn = redis.connection().await?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*{{p:{}}}*", product.id))
        .query_async(&mut conn)
        .await?;
    assert!(
        !keys.is_empty(),
        "the gate wrote nothing into the TLS Redis"
    );
    Ok(())
}
