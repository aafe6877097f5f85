//! Console sign-in: an operator credential in an HttpOnly, SameSite=Strict cookie, checked on every request as the API checks a bearer token.

use axum::{
    extract::{FromRequestParts, State},
    http::{header, request::Parts, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Redirect, Response},
    Form,
};
use maud::html;
use paysaga_common::auth::{admit, allow::OPERATOR, ServiceRole};
use serde::Deserialize;

use crate::{layout, state::ConsoleState};

/// The cookie holding the operator's credential. Scoped to `/console`, so no API route
/// ever sees it (the API takes only `Authorization: Bearer`).
pub const COOKIE: &str = "paysaga_console";

/// A signed-in operator: the credential from the cookie (made for the orchestrator,
/// which serves the console), verified and admitted exactly as `Service<{ OPERATOR }>`
/// admits a bearer token. It stays here: the console calls the order service and the
/// gate with its own read-only credential.
pub struct Operator {
    pub role: ServiceRole,
}

/// Why a credential was refused, in words an operator can act on.
fn check(state: &ConsoleState, token: &str) -> Result<ServiceRole, &'static str> {
    if let Some(role) = state.verifier.verify_service(token) {
        return admit(role.name(), OPERATOR)
            .map_err(|_| "this service credential is not an operator's (role operator)");
    }
    if state.verifier.verify_buyer(token).is_some() {
        return Err("a buyer token cannot sign in: paste a service credential of role operator");
    }
    Err("invalid or expired credential")
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

impl FromRequestParts<ConsoleState> for Operator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &ConsoleState) -> Result<Self, Response> {
        let token = cookie(&parts.headers, COOKIE);
        match token.as_deref().map(|t| check(state, t)) {
            Some(Ok(role)) => Ok(Operator { role }),
            _ => Err(to_sign_in(&parts.headers)),
        }
    }
}

/// Not signed in (or the credential expired): the sign-in page. An htmx request (the
/// drop page's polling) is told to load it as a whole page instead of swapping it in.
fn to_sign_in(headers: &HeaderMap) -> Response {
    if headers.contains_key("hx-request") {
        return (
            StatusCode::UNAUTHORIZED,
            [("hx-redirect", "/console/login")],
        )
            .into_response();
    }
    Redirect::to("/console/login").into_response()
}

/// A state-changing request came from a page of this origin. The cookie is
/// SameSite=Strict, so a cross-site form post arrives without it; this check is the
/// second line: browsers send `Origin` on every POST (and `Sec-Fetch-Site`), and one
/// naming another origin (or `null`) is refused. A POST with neither is refused too:
/// every browser the console supports sends them.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if let Some(origin) = headers.get(header::ORIGIN) {
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        return matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h));
    }
    headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) == Some("same-origin")
}

/// The answer to a POST whose origin is not the console's own.
pub fn cross_origin() -> Response {
    layout::error_page(
        StatusCode::FORBIDDEN,
        "Refused",
        "This action must be sent from the console's own pages (cross-origin request refused).",
        None,
    )
}

pub async fn login_page() -> Response {
    sign_in_form(StatusCode::OK, None)
}

fn sign_in_form(status: StatusCode, error: Option<&str>) -> Response {
    let body = html! {
        @if let Some(e) = error { p.error { (e) } }
        p { "Paste a service credential of role " code { "operator" } " (what "
            code { "paysaga" } " operator commands send as " code { "Authorization: Bearer" } ")." }
        form method="post" action="/console/login" {
            p { label for="token" { "Operator token" } br;
                textarea id="token" name="token" rows="4" required autocomplete="off" spellcheck="false" {} }
            p { button.primary type="submit" id="sign-in" { "Sign in" } }
        }
        p.muted { "The credential is kept in an HttpOnly cookie for this browser session only." }
    };
    (status, layout::bare("Sign in", body)).into_response()
}

#[derive(Deserialize)]
pub struct SignIn {
    token: String,
}

#[tracing::instrument(skip_all)]
pub async fn login(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Form(form): Form<SignIn>,
) -> Response {
    if !same_origin(&headers) {
        return cross_origin();
    }
    let token = form.token.trim();
    // A JWT is base64url and dots; anything else cannot be a credential, and keeping
    // the cookie's value to these characters keeps it a valid cookie.
    if token.is_empty()
        || !token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return sign_in_form(StatusCode::UNAUTHORIZED, Some("that is not a token"));
    }
    match check(&state, token) {
        Ok(role) => {
            tracing::info!(role = %role, "console sign-in");
            let cookie = format!("{COOKIE}={token}; Path=/console; HttpOnly; SameSite=Strict");
            let mut response = Redirect::to("/console/drop").into_response();
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, v);
            }
            response
        }
        Err(why) => sign_in_form(StatusCode::UNAUTHORIZED, Some(why)),
    }
}

pub async fn logout(headers: HeaderMap) -> Response {
    if !same_origin(&headers) {
        return cross_origin();
    }
    let mut response = Redirect::to("/console/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "paysaga_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn only_posts_from_the_consoles_own_origin_pass() {
        let host = ("host", "127.0.0.1:8083");
        assert!(same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:8083")
        ])));
        assert!(same_origin(&headers(&[
            host,
            ("sec-fetch-site", "same-origin")
        ])));
        for refused in [
            headers(&[host, ("origin", "http://evil.example")]),
            headers(&[host, ("origin", "null")]),
            headers(&[host, ("origin", "http://127.0.0.1:8084")]),
            headers(&[host, ("sec-fetch-site", "cross-site")]),
            headers(&[host]),
            headers(&[("origin", "http://127.0.0.1:8083")]),
        ] {
            assert!(!same_origin(&refused), "{refused:?}");
        }
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let h = headers(&[("cookie", "a=1; paysaga_console=abc.def; b=2")]);
        assert_eq!(cookie(&h, COOKIE).as_deref(), Some("abc.def"));
        assert_eq!(cookie(&headers(&[("cookie", "a=1")]), COOKIE), None);
        assert_eq!(
            cookie(&headers(&[("cookie", "paysaga_console=")]), COOKIE),
            None
        );
    }
}
