//! The fault proxy itself, against a local echo server: each fault does what the fault
//! suite relies on, and healing restores the link.

use std::time::{Duration, Instant};

use paysaga_e2e::FaultProxy;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

async fn echo_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind echo server");
    let addr = listener.local_addr().expect("echo address");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

async fn round_trip(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
    s.write_all(msg).await?;
    let mut got = vec![0u8; msg.len()];
    s.read_exact(&mut got).await?;
    Ok(got)
}

#[tokio::test]
async fn healthy_proxy_forwards_both_ways() {
    let proxy = FaultProxy::start(echo_server().await).await.expect("proxy");
    let mut s = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert_eq!(round_trip(&mut s, b"hello").await.expect("echo"), b"hello");
    let c = proxy.counts();
    assert_eq!((c.accepted, c.bytes_up, c.bytes_down), (1, 5, 5));
}

#[tokio::test]
async fn latency_delays_each_direction() {
    let proxy = FaultProxy::start(echo_server().await).await.expect("proxy");
    let mut s = TcpStream::connect(proxy.addr()).await.expect("connect");
    proxy.set_latency(Duration::from_millis(100));
    let start = Instant::now();
    assert_eq!(round_trip(&mut s, b"slow").await.expect("echo"), b"slow");
    // A lower bound only: the proxy sleeps at least this long, whatever the machine's load.
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "took {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn blackhole_holds_bytes_until_it_lifts() {
    let proxy = FaultProxy::start(echo_server().await).await.expect("proxy");
    let mut s = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert_eq!(
        round_trip(&mut s, b"before").await.expect("echo"),
        b"before"
    );
    proxy.set_blackhole(true);
    s.write_all(b"held")
        .await
        .expect("write into the blackhole");
    let mut got = [0u8; 4];
    let stalled = tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut got)).await;
    assert!(
        stalled.is_err(),
        "nothing may come back through a blackhole"
    );
    assert_eq!(
        proxy.counts().bytes_up,
        6,
        "the held bytes were not forwarded"
    );
    proxy.heal();
    s.read_exact(&mut got)
        .await
        .expect("held bytes arrive after healing");
    assert_eq!(&got, b"held");
}

#[tokio::test]
async fn cut_resets_open_connections_and_refuses_new_ones_until_healed() {
    let proxy = FaultProxy::start(echo_server().await).await.expect("proxy");
    let mut open = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert_eq!(round_trip(&mut open, b"a").await.expect("echo"), b"a");

    proxy.cut();
    assert!(
        round_trip(&mut open, b"b").await.is_err(),
        "an open connection is reset by a cut"
    );
    let mut fresh = TcpStream::connect(proxy.addr())
        .await
        .expect("the listener still accepts");
    assert!(
        round_trip(&mut fresh, b"c").await.is_err(),
        "a new connection is reset while cut"
    );
    assert!(proxy.counts().refused >= 1);

    proxy.heal();
    let mut after = TcpStream::connect(proxy.addr())
        .await
        .expect("connect after heal");
    assert_eq!(
        round_trip(&mut after, b"d").await.expect("echo after heal"),
        b"d"
    );
}

#[tokio::test]
async fn cut_for_heals_on_its_own() {
    let proxy = FaultProxy::start(echo_server().await).await.expect("proxy");
    proxy.cut_for(Duration::from_millis(200));
    assert!(proxy.faults().refuse);
    let mut waited = 0;
    while proxy.faults().refuse {
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
        assert!(waited < 200, "the cut never healed");
    }
    let mut s = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert_eq!(round_trip(&mut s, b"back").await.expect("echo"), b"back");
}

#[tokio::test]
async fn reset_connections_spares_new_ones() {
    let proxy = FaultProxy::start(echo_server().await).await.expect("proxy");
    let mut old = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert_eq!(round_trip(&mut old, b"x").await.expect("echo"), b"x");
    proxy.reset_connections();
    assert!(
        round_trip(&mut old, b"y").await.is_err(),
        "the old connection is reset"
    );
    let mut new = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert_eq!(round_trip(&mut new, b"z").await.expect("echo"), b"z");
}

#[tokio::test]
async fn slow_answers_hold_only_the_answers_to_matching_requests() {
    const SLOW: &[u8] = b"POST /v1/debits HTTP/1.1\r\n\r\n";
    const QUICK: &[u8] = b"GET /v1/accounts/7 HTTP/1.1\r\n\r\n";
    let delay = Duration::from_millis(1500);
    let proxy = FaultProxy::start(echo_server().await).await.expect("proxy");
    let mut slow = TcpStream::connect(proxy.addr()).await.expect("connect");
    let mut quick = TcpStream::connect(proxy.addr()).await.expect("connect");
    proxy.set_slow_answers(b"POST /v1/debits", delay);

    let start = Instant::now();
    let slow_answer = tokio::spawn(async move {
        let answer = round_trip(&mut slow, SLOW).await;
        (answer, start.elapsed())
    });
    // The request itself goes through at once: the upstream has it while its answer is held.
    tokio::time::timeout(Duration::from_secs(10), async {
        while proxy.counts().bytes_up < SLOW.len() as u64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the request reaches the upstream");
    assert!(!slow_answer.is_finished(), "the answer was not held");
    // Another request on the same link is not held.
    assert_eq!(round_trip(&mut quick, QUICK).await.expect("echo"), QUICK);
    assert!(
        !slow_answer.is_finished(),
        "the held answer overtook a quick one"
    );

    let (answer, answered_after) = slow_answer.await.expect("task");
    assert_eq!(answer.expect("echo"), SLOW);
    assert!(answered_after >= delay, "held only {answered_after:?}");

    proxy.heal();
    assert_eq!(proxy.faults(), paysaga_e2e::proxy::Faults::default());
}
