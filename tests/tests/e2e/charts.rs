//! The drop page's charts in a real browser: headless Chromium watches a drop through the real processes (a screenshot while buyers are still arriving), then every chart's figures are checked against PostgreSQL.
//!
//! Skipped, with a message, where Chromium or chromedriver is not installed. The
//! screenshot goes where the console test's go (`CONSOLE_SCREENSHOT_DIR`).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use crate::browser::{self, screenshot, Visit};
use crate::console::sign_in_with_code;
use fantoccini::{Client, Locator};
use paysaga_e2e::db::{count_of, wait_for};
use paysaga_e2e::{drop_run, invariants, Driver, DropRun, Stack, StackOptions};
use sqlx::PgPool;

const UNITS: i64 = 24;
const BUYERS: usize = 36;
const PRICE: i64 = 2_500;
/// Buyers arrive in waves of this many, a pause apart, so the charts rise while the
/// browser watches.
const WAVE: usize = 3;
const PAUSE: Duration = Duration::from_millis(700);

/// Every chart of `product` on the page: its id's last part and its data attributes.
async fn charts_of(
    client: &Client,
    product: i64,
) -> anyhow::Result<BTreeMap<String, BTreeMap<String, String>>> {
    let v = client
        .execute(
            r#"
            const out = {};
            for (const s of document.querySelectorAll('svg[id^="chart-' + arguments[0] + '-"]')) {
                const d = {};
                for (const a of s.attributes) if (a.name.startsWith('data-')) d[a.name.slice(5)] = a.value;
                out[s.id.slice(('chart-' + arguments[0] + '-').length)] = d;
            }
            return out;
            "#,
            vec![serde_json::json!(product)],
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// `x:y` pairs as numbers.
fn points(text: &str) -> anyhow::Result<Vec<(f64, f64)>> {
    text.split_whitespace()
        .map(|p| {
            let (x, y) = p
                .split_once(':')
                .ok_or_else(|| anyhow::anyhow!("point {p:?}"))?;
            Ok((x.parse()?, y.parse()?))
        })
        .collect()
}

fn attr<'a>(
    charts: &'a BTreeMap<String, BTreeMap<String, String>>,
    chart: &str,
    name: &str,
) -> anyhow::Result<&'a str> {
    charts
        .get(chart)
        .and_then(|c| c.get(name))
        .map(String::as_str)
        .ok_or_else(|| anyhow::anyhow!("no chart {chart} with data-{name}: {charts:?}"))
}

fn int(
    charts: &BTreeMap<String, BTreeMap<String, String>>,
    chart: &str,
    name: &str,
) -> anyhow::Result<i64> {
    let t = attr(charts, chart, name)?;
    t.parse()
        .map_err(|_| anyhow::anyhow!("data-{name} of {chart} is {t:?}"))
}

/// Checks the charts of `product` on the drop page the browser shows against
/// PostgreSQL: units sold and checkouts from the COMPLETED payments (and the order
/// service's sold units, where `sold_is_completed`), bucket by bucket; the latency
/// percentiles; the waitlist and the payments needing attention now.
pub async fn check(
    client: &Client,
    pool: &PgPool,
    product: i64,
    sold_is_completed: bool,
) -> anyhow::Result<()> {
    let c = charts_of(client, product).await?;
    for name in ["sold", "checkouts", "latency", "waitlist", "attention"] {
        anyhow::ensure!(
            c.contains_key(name),
            "chart {name} of product {product} missing: {c:?}"
        );
    }
    let completed = count_of(
        pool,
        r#"SELECT COUNT(*) FROM payment_service.payments WHERE product_id = $1 AND state = 'COMPLETED'"#,
        product,
    )
    .await?;
    assert_eq!(
        int(&c, "sold", "last")?,
        completed,
        "units sold of {product}"
    );
    assert_eq!(
        int(&c, "sold", "total")?,
        completed,
        "units sold of {product}"
    );
    if sold_is_completed {
        let sold = count_of(
            pool,
            r#"SELECT COUNT(*) FROM order_service.product_stock WHERE product_id = $1 AND state = 'SOLD'"#,
            product,
        )
        .await?;
        assert_eq!(
            completed, sold,
            "COMPLETED payments and sold units of {product}"
        );
    }
    let sold = points(attr(&c, "sold", "series")?)?;
    assert!(
        sold.windows(2).all(|w| w[0].1 <= w[1].1 && w[0].0 < w[1].0),
        "{sold:?}"
    );

    // Checkouts per bucket, recomputed from the payments with the page's bucket width.
    let width = int(&c, "checkouts", "bucket-secs")?;
    let per_bucket: Vec<(i64, i64)> = sqlx::query_as(
        r#"
        WITH answered AS (
            SELECT state, created_at, updated_at FROM payment_service.payments
            WHERE product_id = $1 AND state IN ('COMPLETED', 'FAILED')
        ), start AS (SELECT MIN(created_at) AS t0 FROM answered)
        SELECT FLOOR(EXTRACT(EPOCH FROM updated_at - t0) / $2)::BIGINT AS bucket,
               COUNT(*) FILTER (WHERE state = 'COMPLETED')
        FROM answered, start GROUP BY bucket ORDER BY bucket
        "#,
    )
    .bind(product)
    .bind(width)
    .fetch_all(pool)
    .await?;
    let checkouts = points(attr(&c, "checkouts", "series")?)?;
    assert_eq!(
        int(&c, "checkouts", "points")? as usize,
        checkouts.len(),
        "checkouts' points"
    );
    let buckets = per_bucket.last().map_or(0, |(b, _)| b + 1) as usize;
    assert_eq!(
        checkouts.len(),
        buckets,
        "checkout buckets of {product}: {checkouts:?} {per_bucket:?}"
    );
    assert_eq!(
        sold.len(),
        if buckets == 0 { 0 } else { buckets + 1 },
        "{sold:?}"
    );
    for (bucket, n) in &per_bucket {
        let (x, rate) = checkouts[*bucket as usize];
        assert_eq!(x as i64, bucket * width, "bucket {bucket}'s offset");
        assert!(
            (rate * width as f64 - *n as f64).abs() < 0.01,
            "bucket {bucket}: {rate}/s over {width} s, PostgreSQL {n}"
        );
    }
    let sum: f64 = checkouts.iter().map(|(_, r)| r * width as f64).sum();
    assert_eq!(
        sum.round() as i64,
        completed,
        "checkouts in all of {product}"
    );

    // Latency over the drop: creation to answer of the COMPLETED and FAILED payments.
    let (p50, p95): (Option<f64>, Option<f64>) = sqlx::query_as(
        r#"
        SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.95) WITHIN GROUP (ORDER BY ms)
        FROM (SELECT (EXTRACT(EPOCH FROM updated_at - created_at) * 1000)::FLOAT8 AS ms
              FROM payment_service.payments WHERE product_id = $1 AND state IN ('COMPLETED', 'FAILED')) a
        "#,
    )
    .bind(product)
    .fetch_one(pool)
    .await?;
    for (name, want) in [("p50", p50), ("p95", p95)] {
        let shown = attr(&c, "latency", name)?;
        match want {
            None => assert_eq!(shown, "none", "{name} of {product}"),
            Some(ms) => {
                let shown: f64 = shown.parse()?;
                assert!(
                    (shown - ms).abs() <= 0.051,
                    "{name} of {product}: {shown} shown, {ms} ms"
                );
            }
        }
    }
    let p50s = points(attr(&c, "latency", "series")?)?;
    let p95s = points(attr(&c, "latency", "series-p95")?)?;
    assert_eq!(p50s.len(), per_bucket.len(), "latency points of {product}");
    assert!(
        p50s.iter()
            .zip(&p95s)
            .all(|(a, b)| a.0 == b.0 && a.1 <= b.1),
        "{p50s:?} {p95s:?}"
    );

    // The sampled figures: their newest sample is this page's.
    for (chart, what, sql) in [
        (
            "waitlist",
            "waitlist",
            r#"SELECT COUNT(*) FROM order_service.waitlist_entries WHERE product_id = $1 AND state = 'WAITING'"#,
        ),
        (
            "attention",
            "payments needing attention",
            r#"SELECT COUNT(*) FROM payment_service.payments WHERE product_id = $1 AND needs_attention"#,
        ),
    ] {
        assert_eq!(
            int(&c, chart, "last")?,
            count_of(pool, sql, product).await?,
            "{what} of {product}"
        );
        assert!(int(&c, chart, "points")? >= 1, "{chart}'s points");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drop_charts_in_headless_chromium() -> anyhow::Result<()> {
    let Some(browser) = browser::Installed::find("drop_charts_in_headless_chromium") else {
        return Ok(());
    };
    let stack = Stack::start(StackOptions::new("charts").quick_loops()).await?;
    // Every fifth buyer cannot pay.
    let balances = drop_run::every_nth_short(BUYERS, 5, PRICE);
    let run = DropRun::open(&stack, "charts", PRICE, UNITS, &balances, 8).await?;
    let shots = browser::screenshot_dir("charts-screenshots")?;

    let (product, buyers) = (run.product.id, run.buyers);
    let driver = Driver::new(run.endpoints, Duration::from_secs(10));
    let drop = async move {
        let mut attempts = 0;
        for wave in buyers.chunks(WAVE) {
            attempts += driver.run_drop(wave, product, 0, |_| {}).await.len();
            tokio::time::sleep(PAUSE).await;
        }
        attempts
    };
    browser
        .browse(&stack, &run.pool, &shots, |visit| {
            watch(visit, product, drop)
        })
        .await?;
    eprintln!("screenshots: {}", shots.display());
    Ok(())
}

/// Signs in, starts `drop` and watches it: a screenshot once a third of the units are
/// sold, then, the drop settled, the charts against PostgreSQL.
async fn watch(
    visit: Visit<'_>,
    product: i64,
    drop: impl std::future::Future<Output = usize> + Send + 'static,
) -> anyhow::Result<()> {
    let (client, pool) = (&visit.client, visit.pool);
    let page = format!("{}/drop", visit.console);
    client.goto(&page).await?;
    client.wait().for_element(Locator::Css("#email")).await?;
    sign_in_with_code(client).await?;
    client.wait().for_element(Locator::Css("#live")).await?;

    let drop = tokio::spawn(drop);
    // Mid-rise: a third sold, buyers still arriving. The page refreshes itself; a fresh
    // load shows the figures of this moment.
    wait_for(
        pool,
        "a third of the units sold",
        &format!("SELECT LEAST(COUNT(*), {}) FROM payment_service.payments WHERE product_id = {product} AND state = 'COMPLETED'", UNITS / 3),
        UNITS / 3,
    )
    .await?;
    client.goto(&page).await?;
    client
        .wait()
        .for_element(Locator::Css(&format!("#chart-{product}-sold")))
        .await?;
    // Samples a second apart, so the sampled charts show a line.
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        client.goto(&page).await?;
    }
    client
        .wait()
        .for_element(Locator::Css(&format!("#chart-{product}-sold")))
        .await?;
    let mid = charts_of(client, product).await?;
    let mid_sold = int(&mid, "sold", "last")?;
    assert!(
        mid_sold > 0 && mid_sold < UNITS,
        "mid-drop: {mid_sold} sold"
    );
    screenshot(client, visit.shots, "drop").await?;

    let attempts = drop.await?;
    assert_eq!(attempts, BUYERS);
    let report = invariants::settled(pool, Duration::from_secs(60)).await?;
    report.assert_holds();
    assert!(
        (1..=UNITS).contains(&report.payments_completed),
        "{report:#?}"
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    client.goto(&page).await?;
    client
        .wait()
        .at_most(deadline - Instant::now())
        .for_element(Locator::Css(&format!("#chart-{product}-sold")))
        .await?;
    check(client, pool, product, true).await
}
