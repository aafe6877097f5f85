//! Each service's API reference (`/docs`) in headless Chromium with no route out: the
//! page renders every operation its `/openapi.json` names, and everything it loaded came
//! from the service itself.
//!
//! Screenshots go to `API_DOCS_SCREENSHOT_DIR` (the documentation's are made with
//! `docs/api-docs`), else to the harness's log directory.

use std::{path::PathBuf, time::Duration};

use fantoccini::{Client, Locator};
use paysaga_e2e::{Endpoints, Stack, StackOptions};
use serde_json::Value;

use crate::browser::{self, screenshot};

/// The operations an OpenAPI document names, one per path (or webhook) and HTTP method:
/// what the reference page shows, each as one block.
fn operations(openapi: &Value) -> usize {
    const METHODS: [&str; 8] = [
        "get", "put", "post", "delete", "options", "head", "patch", "trace",
    ];
    ["paths", "webhooks"]
        .iter()
        .filter_map(|section| openapi[section].as_object())
        .flat_map(|items| items.values())
        .map(|item| METHODS.iter().filter(|m| item.get(**m).is_some()).count())
        .sum()
}

/// A page served on this machine's address other than loopback (`None` if it has
/// none), fetched once by the test itself to show that it is there.
async fn outside_page() -> anyhow::Result<Option<String>> {
    // Routing picks the source address of a datagram to TEST-NET-2; nothing is sent.
    let ip = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("198.51.100.1:9").map(|()| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
    let Some(ip) = ip else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let page = axum::Router::new().route(
        "/",
        axum::routing::get(|| async { axum::response::Html("<p>reachable from outside</p>") }),
    );
    tokio::spawn(async move { axum::serve(listener, page).await });
    let text = reqwest::get(&url).await?.text().await?;
    anyhow::ensure!(
        text.contains("reachable from outside"),
        "{url} answered {text}"
    );
    Ok(Some(url))
}

/// A number the page's script computes.
async fn count(client: &Client, script: &str) -> anyhow::Result<usize> {
    let v = client.execute(script, vec![]).await?;
    Ok(v.as_u64().unwrap_or(0) as usize)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_api_reference_renders_offline_in_chromium() -> anyhow::Result<()> {
    let Some(installed) =
        browser::Installed::find("every_api_reference_renders_offline_in_chromium")
    else {
        return Ok(());
    };
    let stack = Stack::start(StackOptions::new("api-docs")).await?;
    let endpoints = Endpoints::from_wiring(stack.wiring());
    let shots = match std::env::var_os("API_DOCS_SCREENSHOT_DIR") {
        Some(d) => PathBuf::from(d),
        None => paysaga_e2e::binaries::log_dir("api-docs-screenshots")?,
    };
    std::fs::create_dir_all(&shots)?;
    let http = paysaga_common::client::http_client(Duration::from_secs(10));

    let session = installed.open(&browser::OFFLINE).await?;
    let client = &session.client;
    // The browser really has no route out: a page this machine serves on an address
    // other than loopback, which the test itself can fetch, does not load in it.
    match outside_page().await? {
        Some(outside) => {
            let _ = client.goto(&outside).await;
            let body = count(
                client,
                "return document.body.innerText.includes('reachable from outside') ? 1 : 0",
            )
            .await?;
            assert_eq!(body, 0, "the browser reached {outside}");
        }
        None => eprintln!("no address but loopback here: the route-out check is skipped"),
    }

    for (service, base) in [
        ("member", &endpoints.member),
        ("gate", &endpoints.gate),
        ("order", &endpoints.order),
        ("account", &endpoints.account),
        ("orchestrator", &endpoints.orchestrator),
    ] {
        let openapi: Value = http
            .get(format!("{base}/openapi.json"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let want = operations(&openapi);
        anyhow::ensure!(want > 0, "{service} names no operation");
        client.goto(&format!("{base}/docs")).await?;
        // Swagger UI renders every operation in one pass once the document is loaded.
        client.wait().for_element(Locator::Css(".opblock")).await?;
        let shown = count(
            client,
            "return document.querySelectorAll('.opblock').length",
        )
        .await?;
        screenshot(client, &shots, service).await?;
        assert_eq!(shown, want, "{service}: operations shown offline");
        // Every script, style and document the page loaded came from the service.
        let loaded = client
            .execute(
                "return performance.getEntriesByType('resource').map(e => e.name)",
                vec![],
            )
            .await?;
        let loaded: Vec<String> = serde_json::from_value(loaded)?;
        anyhow::ensure!(!loaded.is_empty(), "{service}: the page loaded nothing");
        for url in &loaded {
            assert!(
                url.starts_with(base.as_str()),
                "{service}: /docs loaded {url} from elsewhere"
            );
        }
    }
    session.close().await?;
    eprintln!("screenshots: {}", shots.display());
    Ok(())
}
