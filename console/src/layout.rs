//! The console's page frame, error pages and small formatting helpers.

use axum::{
    http::StatusCode,
    response::{Html, IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};

use crate::desk::DeskError;

/// Which section a page belongs to, for the navigation bar.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Drop,
    Payments,
    Webhooks,
    Audit,
    Approvals,
}

fn head(title: &str, refresh: Option<u32>) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            // Without scripts the page still refreshes itself, only as a whole.
            @if let Some(secs) = refresh {
                noscript { meta http-equiv="refresh" content=(secs); }
            }
            meta name="viewport" content="width=device-width, initial-scale=1";
            // htmx would otherwise add an inline style element, which the console's
            // Content-Security-Policy (style-src 'self') refuses.
            meta name="htmx-config" content=r#"{"includeIndicatorStyles":false}"#;
            title { (title) " · paysaga console" }
            link rel="stylesheet" href="/console/assets/console.css";
            script src="/console/assets/htmx.min.js" defer {}
        }
    }
}

/// A signed-in page: navigation, a title and the body.
pub fn page(section: Section, title: &str, body: Markup) -> Html<String> {
    framed(section, title, body, None)
}

/// [`page`] that reloads itself every `refresh` seconds when scripts are off.
pub fn framed(section: Section, title: &str, body: Markup, refresh: Option<u32>) -> Html<String> {
    let nav = |s: Section, href: &str, label: &str| {
        html! { a href=(href) class=[(s == section).then_some("here")] { (label) } }
    };
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                (head(title, refresh))
                body {
                    header {
                        span.brand { "paysaga console" }
                        (nav(Section::Drop, "/console/drop", "Drop"))
                        (nav(Section::Payments, "/console/payments", "Payments"))
                        (nav(Section::Webhooks, "/console/webhooks", "Webhooks"))
                        (nav(Section::Audit, "/console/audit", "Audit"))
                        (nav(Section::Approvals, "/console/approvals", "Approvals"))
                        form method="post" action="/console/logout" {
                            button type="submit" { "Sign out" }
                        }
                    }
                    main { h1 { (title) } (body) }
                }
            }
        }
        .into_string(),
    )
}

/// A page without navigation (sign-in).
pub fn bare(title: &str, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                (head(title, None))
                body {
                    header { span.brand { "paysaga console" } }
                    main { h1 { (title) } (body) }
                }
            }
        }
        .into_string(),
    )
}

/// An error as a page with its status.
pub fn error_page(
    status: StatusCode,
    title: &str,
    message: &str,
    section: Option<Section>,
) -> Response {
    let body = html! {
        p.error { (message) }
        p { a href="/console/drop" { "Back to the drop" } }
    };
    let page = match section {
        Some(s) => page(s, title, body),
        None => bare(title, body),
    };
    (status, page).into_response()
}

/// An error of the operator logic, with the code and message the API would answer.
pub fn failed(err: impl Into<DeskError>, section: Section) -> Response {
    match err.into() {
        DeskError::Refused(api) => error_page(api.status, api.code, &api.message, Some(section)),
        err @ DeskError::Internal(_) => {
            tracing::error!(error = %err, "console request failed");
            error_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal error",
                "The request failed inside the orchestrator; its log has the details.",
                Some(section),
            )
        }
    }
}

/// A time as UTC, to the second.
pub fn at(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// How long ago, in the largest whole unit.
pub fn age(t: DateTime<Utc>) -> String {
    let secs = (Utc::now() - t).num_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

/// Minor units as a decimal amount.
pub fn money(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let m = minor.unsigned_abs();
    format!("{sign}{}.{:02}", m / 100, m % 100)
}
