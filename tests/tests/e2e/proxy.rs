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

/// A proxy in front of an echo server, and a connection through it.
async fn echo_proxy() -> (FaultProxy, TcpStream) {
    let proxy = FaultProxy::start(echo_server().await).await.expect("proxy");
    let conn = connect(&proxy).await;
    (proxy, conn)
}

/// [`echo_proxy`], its connection checked with `msg` echoed through it.
async fn echoing_proxy(msg: &[u8]) -> (FaultProxy, TcpStream) {
    let (proxy, mut conn) = echo_proxy().await;
    echoes(&mut conn, msg).await;
    (proxy, conn)
}

/// A new connection through `proxy` (the listener accepts even while cut).
async fn connect(proxy: &FaultProxy) -> TcpStream {
    TcpStream::connect(proxy.addr()).await.expect("connect")
}

/// `msg` sent on `conn` finds the connection reset.
async fn is_reset(conn: &mut TcpStream, msg: &[u8], why: &str) {
    assert!(round_trip(conn, msg).await.is_err(), "{why}");
}

/// `msg` sent on `conn` comes back whole.
async fn echoes(conn: &mut TcpStream, msg: &[u8]) {
    assert_eq!(round_trip(conn, msg).await.expect("echo"), msg);
}

#[tokio::test]
async fn healthy_proxy_forwards_both_ways() {
    let (proxy, _conn) = echoing_proxy(b"hello").await;
    let c = proxy.counts();
    assert_eq!((c.accepted, c.bytes_up, c.bytes_down), (1, 5, 5));
}

#[tokio::test]
async fn latency_delays_each_direction() {
    let (proxy, mut s) = echo_proxy().await;
    proxy.set_latency(Duration::from_millis(100));
    let start = Instant::now();
    echoes(&mut s, b"slow").await;
    // A lower bound only: the proxy sleeps at least this long, whatever the machine's load.
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "took {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn blackhole_holds_bytes_until_it_lifts() {
    let (proxy, mut s) = echo_proxy().await;
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
    let (proxy, mut open) = echoing_proxy(b"a").await;

    proxy.cut();
    is_reset(&mut open, b"b", "an open connection is reset by a cut").await;
    let mut fresh = connect(&proxy).await;
    is_reset(&mut fresh, b"c", "a new connection is reset while cut").await;
    assert!(proxy.counts().refused >= 1);

    proxy.heal();
    echoes(&mut connect(&proxy).await, b"d").await;
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
    echoes(&mut connect(&proxy).await, b"back").await;
}

#[tokio::test]
async fn reset_connections_spares_new_ones() {
    let (proxy, mut old) = echoing_proxy(b"x").await;
    proxy.reset_connections();
    is_reset(&mut old, b"y", "the old connection is reset").await;
    echoes(&mut connect(&proxy).await, b"z").await;
}

#[tokio::test]
async fn slow_answers_hold_only_the_answers_to_matching_requests() {
    const SLOW: &[u8] = b"POST /v1/debits HTTP/1.1\r\n\r\n";
    const QUICK: &[u8] = b"GET /v1/accounts/7 HTTP/1.1\r\n\r\n";
    let delay = Duration::from_millis(1500);
    let (proxy, mut slow) = echo_proxy().await;
    let mut quick = connect(&proxy).await;
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
