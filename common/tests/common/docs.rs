//! `/docs` works with no route out: the page and everything it loads come from the
//! service itself, nothing it names points elsewhere, and each answer carries a
//! Content-Security-Policy that lets only this origin's scripts run.

use axum::Router;
use paysaga_common::{
    limits::ServerLimits,
    server::{finish_with, DOCS_CSP},
};
use tokio::net::TcpListener;
use utoipa::openapi::{InfoBuilder, OpenApiBuilder};

/// The shared layers around an empty API, served on a free port.
async fn served() -> String {
    let openapi = OpenApiBuilder::new()
        .info(InfoBuilder::new().title("docs test").version("1").build())
        .build();
    let app: Router = finish_with(Router::new(), openapi, ServerLimits::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// Every `src="…"` and `href="…"` value in `html`.
fn references(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for attr in ["src=\"", "href=\""] {
        let mut rest = html;
        while let Some(at) = rest.find(attr) {
            rest = &rest[at + attr.len()..];
            let end = rest.find('"').expect("attribute closed");
            found.push(rest[..end].to_owned());
            rest = &rest[end..];
        }
    }
    found
}

/// The body of `url`, once it answered 200 with the docs' Content-Security-Policy: every
/// fetch here checks that much before looking at what came back.
async fn served_text(http: &reqwest::Client, url: String, what: &str) -> String {
    let response = http.get(url).send().await.expect(what);
    assert_eq!(response.status(), 200, "{what} is served");
    let csp = response
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("{what} has no Content-Security-Policy"))
        .to_owned();
    assert_eq!(csp, DOCS_CSP, "{what}");
    response.text().await.expect(what)
}

#[test]
fn the_docs_policy_lets_only_this_origin_run_scripts() {
    let directives: Vec<&str> = DOCS_CSP.split(';').map(str::trim).collect();
    for needed in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "form-action 'none'",
    ] {
        assert!(directives.contains(&needed), "{needed} in {DOCS_CSP}");
    }
    assert!(
        !is_elsewhere(DOCS_CSP) && !DOCS_CSP.contains('*'),
        "no other origin is allowed: {DOCS_CSP}"
    );
    let scripts = directives
        .iter()
        .find(|d| d.starts_with("script-src"))
        .expect("script-src");
    assert!(
        !scripts.contains("unsafe-inline") && !scripts.contains("unsafe-eval"),
        "{scripts}"
    );
}

fn is_elsewhere(text: &str) -> bool {
    text.contains("http://") || text.contains("https://") || text.contains("//cdn")
}

#[tokio::test]
async fn the_docs_page_and_all_it_loads_come_from_the_service() {
    let base = served().await;
    let http = reqwest::Client::new();
    let html = served_text(&http, format!("{base}/docs/"), "docs page").await;
    let refs = references(&html);
    assert!(
        refs.iter().any(|r| r.ends_with(".js")),
        "the page loads its scripts: {refs:?}"
    );
    for r in &refs {
        assert!(
            !r.starts_with("//") && !r.contains("://"),
            "{r} points elsewhere"
        );
        let url = format!("{base}/docs/{}", r.trim_start_matches("./"));
        let body = served_text(&http, url, r).await;
        assert!(!body.is_empty(), "{r} has content");
    }
    let init_url = format!("{base}/docs/swagger-initializer.js");
    let init = served_text(&http, init_url, "initializer").await;
    assert!(init.contains("/openapi.json"), "{init}");
    assert!(
        !is_elsewhere(&init),
        "the initializer names no other host: {init}"
    );
    // The bare path lands on the same page.
    let bare = served_text(&http, format!("{base}/docs"), "bare docs page").await;
    assert_eq!(bare, html);
    let spec: serde_json::Value = http
        .get(format!("{base}/openapi.json"))
        .send()
        .await
        .expect("spec")
        .json()
        .await
        .expect("spec json");
    assert_eq!(spec["info"]["title"], "docs test");
    assert!(spec["openapi"].as_str().is_some_and(|v| v.starts_with('3')));
}
