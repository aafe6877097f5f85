//! The ceilings measure what they claim: every commit-loop answer is a committed row
//! update, the HTTP ceiling really authenticates buyers, the Redis ceiling really runs
//! the script.

use std::time::Duration;

use paysaga_bench::{
    ceiling::{http, pg_commit, redis_eval, server},
    client::{http_client, Buyers},
    load::Load,
};
use paysaga_common::testkit::{service_token, TestDb, TestRedis};

fn load(name: &str, concurrency: usize, ops: u64) -> Load {
    Load {
        show_progress: false,
        ..Load::new(name, concurrency, ops, Duration::from_secs(120))
    }
}

#[tokio::test]
async fn every_commit_loop_answer_is_a_committed_update() {
    let db = TestDb::new().await;
    let summary = pg_commit::run(&load("commits", 8, 400), &db.admin_url(), 4)
        .await
        .unwrap();
    assert_eq!(summary.count("ok"), 400);
    assert_eq!(summary.errors(), 0);
    let (rows, total): (i64, i64) =
        sqlx::query_as(r#"SELECT COUNT(*), SUM(n)::BIGINT FROM public.bench_commit_ceiling"#)
            .fetch_one(&db.admin_pool().await)
            .await
            .unwrap();
    // One row per virtual client, and the increments add up to the answers counted.
    assert_eq!(rows, 8);
    assert_eq!(total, 400);
}

async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

#[tokio::test]
async fn the_http_ceiling_authenticates_buyers_as_the_services_do() {
    let (plain, stack) = server::routers().unwrap();
    let (plain, stack) = (serve(plain).await, serve(stack).await);
    let client = http_client(4).unwrap();
    let buyers = Buyers::development("ceiling-test", 10);

    for url in [
        format!("{plain}/v1/auth"),
        format!("{stack}/v1/auth"),
        format!("{plain}/v1/bare"),
    ] {
        let s = http::run(
            &load("valid", 4, 50),
            client.clone(),
            url.clone(),
            buyers.clone(),
        )
        .await;
        assert_eq!(s.count("ok"), 50, "{url}: {:?}", s.outcomes.keys());
    }

    // A service credential is not a buyer: 403, exactly as on a service's buyer route.
    let services = Buyers {
        members: buyers.members.clone(),
        tokens: vec![service_token("gate", paysaga_common::auth::Audience::Gate)].into(),
    };
    let s = http::run(
        &load("service", 2, 10),
        client.clone(),
        format!("{plain}/v1/auth"),
        services,
    )
    .await;
    assert_eq!(
        s.count("error:403:FORBIDDEN"),
        10,
        "{:?}",
        s.outcomes.keys()
    );

    let forged = Buyers {
        members: buyers.members.clone(),
        tokens: vec!["not-a-token".to_owned()].into(),
    };
    let s = http::run(
        &load("forged", 2, 10),
        client.clone(),
        format!("{plain}/v1/auth"),
        forged.clone(),
    )
    .await;
    assert_eq!(
        s.count("error:401:UNAUTHENTICATED"),
        10,
        "{:?}",
        s.outcomes.keys()
    );
    // The bare handler beside it does not look at the token at all.
    let s = http::run(
        &load("bare", 2, 10),
        client,
        format!("{plain}/v1/bare"),
        forged,
    )
    .await;
    assert_eq!(s.count("ok"), 10);
}

#[tokio::test]
async fn the_redis_ceiling_runs_the_script_every_time() {
    let redis = TestRedis::new();
    let s = redis_eval::run(&load("evalsha", 8, 1_000), &redis.url, &redis.prefix)
        .await
        .unwrap();
    assert_eq!(s.count("ok"), 1_000);
    assert_eq!(s.errors(), 0);
}
