//! Slow-header clients against the real order service: connections that send the head of
//! a `POST /v1/reservations` a few bytes at a time and never finish it are closed by the
//! header-read timer (`HTTP_HEADER_READ_TIMEOUT_MS`), reserve nothing (read back from
//! PostgreSQL), and hold up no other request; the same request sent at once reserves.
//!
//! Only the order service runs, on the development buyer key (`MEMBER_JWKS_URL` unset for
//! it): the attack is on its HTTP server, which reads no member service to refuse it.

use paysaga_common::auth::Audience;
use std::time::Duration;

use paysaga_common::{
    auth::MemberId,
    keys::DevKey,
    pass::{PassClaims, PassSigner},
    testkit::{buyer_token, rows_as_text, service_token},
};
use paysaga_contracts::{
    account::{api::OpenAccountRequest, client::AccountClient},
    order::{api::CreateProduct, client::OrderClient},
};
use paysaga_e2e::{ServiceKind, Stack, StackOptions};
use sqlx::PgPool;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::oneshot,
};

/// The order service's header-read timer in this test.
const HEADER_READ_TIMEOUT_MS: u64 = 1_000;
/// Slow connections open at once.
const SLOW_CLIENTS: usize = 4;
/// Bytes per write, and the pause before each: 40 bytes a second, so the head below
/// (over 400 bytes) would take ten times the timer even if it ended.
const CHUNK: usize = 4;
const PAUSE: Duration = Duration::from_millis(100);
/// How long a slow connection is watched for the server to close it before the test
/// fails (a bound on a hang, far above the timer).
const CLOSED_WITHIN: Duration = Duration::from_secs(30);

/// Every row of the reservation, unit and order tables as text, in a fixed order.
async fn snapshot(pool: &PgPool) -> Vec<String> {
    rows_as_text(
        pool,
        &[
            "order_service.reservations",
            "order_service.product_stock",
            "order_service.orders",
        ],
    )
    .await
}

/// (reservations, available units, reserved units, sold units) of a product.
async fn counts(pool: &PgPool, product_id: i64) -> (i64, i64, i64, i64) {
    let reservations: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM order_service.reservations WHERE product_id = $1"#,
    )
    .bind(product_id)
    .fetch_one(pool)
    .await
    .expect("reservations");
    let u = paysaga_e2e::invariants::unit_states(pool, product_id)
        .await
        .expect("units");
    (reservations, u.available, u.reserved, u.sold)
}

/// A complete, valid reservation request for `member`: its head without the blank line
/// that ends it, and its body.
fn request(host: &str, product_id: i64, member: &str) -> (String, String) {
    let pass = PassSigner::new(DevKey::Passes.signing_key()).sign(&PassClaims {
        pid: uuid::Uuid::new_v4(),
        prd: product_id,
        mem: member.to_owned(),
        exp: chrono::Utc::now().timestamp() + 300,
    });
    let body = serde_json::json!({"product_id": product_id, "pass": pass}).to_string();
    let head = format!(
        "POST /v1/reservations HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        buyer_token(member),
        body.len()
    );
    (head, body)
}

/// What one slow connection saw.
struct Dribbled {
    /// Bytes written before the server closed the connection.
    sent: usize,
    /// What the server sent back before closing (nothing, or an error status).
    answer: Vec<u8>,
}

/// Sends `head` `CHUNK` bytes at a time, then keeps it open with a header value that
/// never ends, until the server closes the connection (EOF or reset); `None` if it is
/// still open after `CLOSED_WITHIN`. `started` is told once its first bytes are out.
async fn dribble(host: String, head: String, started: oneshot::Sender<()>) -> Option<Dribbled> {
    let tcp = TcpStream::connect(&host).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let (mut rd, mut wr) = tcp.into_split();
    let mut sent = 0;
    let mut started = Some(started);
    let bytes = head
        .into_bytes()
        .into_iter()
        .chain(b"X-Slow: ".iter().copied());
    let endless = bytes.chain(std::iter::repeat(b'a'));
    let writer = async {
        let mut endless = endless;
        loop {
            let chunk: Vec<u8> = endless.by_ref().take(CHUNK).collect();
            tokio::time::sleep(PAUSE).await;
            if wr.write_all(&chunk).await.is_err() {
                // Reset: the reader sees it too.
                return std::future::pending::<()>().await;
            }
            sent += chunk.len();
            if let Some(tell) = started.take() {
                let _ = tell.send(());
            }
        }
    };
    let reader = async {
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return answer,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    };
    let answer = tokio::time::timeout(CLOSED_WITHIN, async {
        tokio::select! {
            answer = reader => answer,
            () = writer => unreachable!("the writer only ends by being dropped"),
        }
    })
    .await
    .ok()?;
    Some(Dribbled { sent, answer })
}

/// Sends `head`, the blank line and `body` at once; the status line of the answer.
async fn send_at_once(host: &str, head: &str, body: &str) -> String {
    let mut tcp = TcpStream::connect(host).await.expect("connect");
    tcp.write_all(format!("{head}\r\n{body}").as_bytes())
        .await
        .expect("write");
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tcp.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_off_write_nothing_and_hold_up_no_one() -> anyhow::Result<()> {
    let stack = Stack::start(
        // The account service holds the price of the one reservation made.
        StackOptions::new("slow-client")
            .only(&[ServiceKind::Account, ServiceKind::Order])
            .env(
                ServiceKind::Order,
                "HTTP_HEADER_READ_TIMEOUT_MS",
                HEADER_READ_TIMEOUT_MS,
            )
            .env(ServiceKind::Order, "MEMBER_JWKS_URL", "")
            .env(ServiceKind::Account, "MEMBER_JWKS_URL", ""),
    )
    .await?;
    let base = stack.url(ServiceKind::Order);
    let host = base.trim_start_matches("http://").to_owned();
    // No idle pooled connections: the server closes those after the same short timer.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()?;
    let operator = OrderClient::with_http(
        http.clone(),
        &base,
        service_token("operator", Audience::Order),
    );
    let gate = OrderClient::with_http(http.clone(), &base, service_token("gate", Audience::Order));
    let product = operator
        .create_product(&CreateProduct {
            name: "slow".into(),
            price: 1_000,
            units: 3,
            reservation_ttl_secs: None,
            eligibility: Vec::new(),
        })
        .await?
        .body;
    let pool = stack.admin_pool().await;
    let before = snapshot(&pool).await;
    assert_eq!(counts(&pool, product.id).await, (0, 3, 0, 0));

    let requests: Vec<(String, String)> = (0..SLOW_CLIENTS)
        .map(|i| request(&host, product.id, &format!("slow-{i}")))
        .collect();
    let mut slow = Vec::new();
    let mut started = Vec::new();
    for (head, _) in &requests {
        let (tell, told) = oneshot::channel();
        slow.push(tokio::spawn(dribble(host.clone(), head.clone(), tell)));
        started.push(told);
    }
    for told in started {
        told.await?;
    }

    // Meanwhile, on other connections, the service answers as usual.
    let available = gate.availability(product.id).await?;
    assert_eq!((available.status, available.body.available), (200, 3));
    let read = operator.product(product.id).await?;
    assert_eq!((read.status, read.body.id), (200, product.id));

    for (i, handle) in slow.into_iter().enumerate() {
        let seen = handle
            .await?
            .unwrap_or_else(|| panic!("slow client {i} still connected after {CLOSED_WITHIN:?}"));
        let answer = String::from_utf8_lossy(&seen.answer);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 4"),
            "slow client {i} was answered: {answer}"
        );
        assert!(seen.sent > 0);
    }

    // Nothing reached the handler: no reservation, no unit moved, no row changed.
    assert_eq!(
        snapshot(&pool).await,
        before,
        "a slow client wrote something"
    );
    assert_eq!(counts(&pool, product.id).await, (0, 3, 0, 0));

    // The same request sent at once is a valid one: it reserves (its member's account
    // holding the price).
    AccountClient::new(
        stack.url(ServiceKind::Account),
        service_token("operator", Audience::Account),
        Duration::from_secs(10),
    )
    .open_account(&OpenAccountRequest {
        member_id: MemberId::parse("slow-0").map_err(anyhow::Error::msg)?,
        opening_balance: 1_000,
        open_key: None,
    })
    .await?;
    let (head, body) = &requests[0];
    let status = send_at_once(&host, head, body).await;
    assert!(status.starts_with("HTTP/1.1 201"), "{status}");
    assert_eq!(counts(&pool, product.id).await, (1, 2, 1, 0));
    let member: String = sqlx::query_scalar(r#"SELECT member_id FROM order_service.reservations"#)
        .fetch_one(&pool)
        .await?;
    assert_eq!(member, "slow-0");
    Ok(())
}
