//! Console sign-in: people sign in as themselves (email and password, then a TOTP code
//! or a recovery code) into a server-side staff session whose random token is kept in
//! an HttpOnly, SameSite=Strict cookie; every page checks the session and the person's
//! role. Service credentials do not sign in here.

use axum::{
    extract::{FromRequestParts, State},
    http::{header, request::Parts, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Redirect, Response},
    Form,
};
use maud::html;
use paysaga_staff::{
    error::role_names, extract::ClientAddr, sessions::looks_like_token, Acting, Actor, Error,
};
use serde::Deserialize;

use crate::{layout, state::ConsoleState};

/// The cookie holding the staff session's token (or, between the two steps of a
/// sign-in, the token of the session awaiting its second factor). Scoped to `/console`,
/// so no API route ever sees it (the API takes only `Authorization: Bearer`).
pub const COOKIE: &str = "paysaga_console";

/// A signed-in person whose role the page's allow list (bits of
/// `paysaga_staff::allow`) admits: `Person<{ OPERATOR | ADMIN }>`. Not signed in (or the
/// session expired or was signed out): the sign-in page. Another role: 403
/// `FORBIDDEN_ROLE`, before the page reads or does anything.
pub struct Person<const ALLOW: u8>(pub Acting);

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

impl<const ALLOW: u8> FromRequestParts<ConsoleState> for Person<ALLOW> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &ConsoleState) -> Result<Self, Response> {
        let Some(token) = cookie(&parts.headers, COOKIE) else {
            return Err(to_sign_in(&parts.headers));
        };
        let ClientAddr(from) = ClientAddr::from_request_parts(parts, state)
            .await
            .unwrap_or(ClientAddr(None));
        match state.staff.admit(&token, ALLOW).await {
            Ok(who) => Ok(Person(Acting {
                actor: Actor::Staff(who),
                from,
            })),
            Err(Error::NoSession) => Err(to_sign_in(&parts.headers)),
            Err(Error::ForbiddenRole(allowed)) => Err(layout::error_page(
                StatusCode::FORBIDDEN,
                paysaga_contracts::staff::api::codes::FORBIDDEN_ROLE,
                &format!("This page admits staff of role: {}.", role_names(allowed)),
                // With the header, so the person can go elsewhere or sign out.
                Some(layout::Section::Drop),
            )),
            Err(e) => Err(layout::failed(e, layout::Section::Drop)),
        }
    }
}

impl<const ALLOW: u8> Person<ALLOW> {
    /// Who, for logs.
    pub fn name(&self) -> String {
        self.0.actor.name()
    }
}

/// Not signed in (or the session ended): the sign-in page. An htmx request (the drop
/// page's polling) is told to load it as a whole page instead of swapping it in.
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

/// A request sent from the console's own pages ([`same_origin`]): a handler that takes
/// one cannot forget the check. Any other request is answered [`cross_origin`] before
/// the handler reads its form or does anything.
pub struct SameOrigin;

impl<S: Send + Sync> FromRequestParts<S> for SameOrigin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        if same_origin(&parts.headers) {
            Ok(SameOrigin)
        } else {
            Err(cross_origin())
        }
    }
}

pub async fn login_page() -> Response {
    sign_in_form(StatusCode::OK, None)
}

fn sign_in_form(status: StatusCode, error: Option<&str>) -> Response {
    let body = html! {
        @if let Some(e) = error { p.error #sign-in-error { (e) } }
        form method="post" action="/console/login" {
            p { label for="email" { "Email" } br;
                input type="email" id="email" name="email" required autocomplete="username"; }
            p { label for="password" { "Password" } br;
                input type="password" id="password" name="password" required autocomplete="current-password"; }
            p { button.primary type="submit" id="sign-in" { "Continue" } }
        }
        p.muted { "Then a code from your authenticator app (or one of your recovery codes)." }
    };
    (status, layout::bare("Sign in", body)).into_response()
}

fn code_form(status: StatusCode, email: &str, error: Option<&str>) -> Response {
    let body = html! {
        @if let Some(e) = error { p.error #sign-in-error { (e) } }
        p { "Signing in as " strong #signing-in { (email) } "." }
        form method="post" action="/console/login/code" {
            p { label for="code" { "Code from your authenticator app, or a recovery code" } br;
                input type="text" id="code" name="code" required autocomplete="one-time-code" inputmode="text" spellcheck="false"; }
            p { button.primary type="submit" id="verify" { "Sign in" } }
        }
        p { a href="/console/login" { "Start over" } }
    };
    (status, layout::bare("Second factor", body)).into_response()
}

/// `Set-Cookie` for `token` (a session's, which is base64url after its prefix), or the
/// cookie's removal.
fn set_cookie(mut response: Response, token: Option<&str>) -> Response {
    let value = match token {
        Some(t) if looks_like_token(t) => {
            format!("{COOKIE}={t}; Path=/console; HttpOnly; SameSite=Strict")
        }
        _ => format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0"),
    };
    if let Ok(v) = HeaderValue::from_str(&value) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

/// What a refused step shows: which rule, never which of email, password or code was wrong.
fn refusal(e: &Error) -> Option<(StatusCode, &'static str)> {
    match e {
        Error::SignInFailed => Some((StatusCode::UNAUTHORIZED, "Wrong email, password or code.")),
        Error::TooManyAttempts(_) => Some((
            StatusCode::TOO_MANY_REQUESTS,
            "Too many sign-in attempts; wait a minute and try again.",
        )),
        Error::NoSession => Some((
            StatusCode::UNAUTHORIZED,
            "The sign-in took too long or had too many wrong codes; start over.",
        )),
        _ => None,
    }
}

#[derive(Deserialize)]
pub struct SignIn {
    email: String,
    password: String,
}

#[tracing::instrument(skip_all)]
pub async fn login(
    State(state): State<ConsoleState>,
    ClientAddr(from): ClientAddr,
    _: SameOrigin,
    Form(form): Form<SignIn>,
) -> Response {
    match state
        .staff
        .check_password(&form.email, form.password, from)
        .await
    {
        Ok(pending) => set_cookie(
            Redirect::to("/console/login/code").into_response(),
            Some(&pending.token),
        ),
        Err(e) => match refusal(&e) {
            Some((status, why)) => sign_in_form(status, Some(why)),
            None => layout::failed(e, layout::Section::Drop),
        },
    }
}

/// The second step's form, for a browser whose password was accepted.
pub async fn code_page(State(state): State<ConsoleState>, headers: HeaderMap) -> Response {
    let pending = match cookie(&headers, COOKIE) {
        Some(token) => state.staff.pending(&token).await,
        None => Ok(None),
    };
    match pending {
        Ok(Some(email)) => code_form(StatusCode::OK, &email, None),
        Ok(None) => Redirect::to("/console/login").into_response(),
        Err(e) => layout::failed(e, layout::Section::Drop),
    }
}

#[derive(Deserialize)]
pub struct Code {
    code: String,
}

#[tracing::instrument(skip_all)]
pub async fn verify_code(
    State(state): State<ConsoleState>,
    ClientAddr(from): ClientAddr,
    headers: HeaderMap,
    _: SameOrigin,
    Form(form): Form<Code>,
) -> Response {
    let Some(pending) = cookie(&headers, COOKIE) else {
        return Redirect::to("/console/login").into_response();
    };
    let email = state.staff.pending(&pending).await.ok().flatten();
    match state.staff.check_code(&pending, &form.code, from).await {
        Ok(session) => set_cookie(
            Redirect::to("/console/drop").into_response(),
            Some(&session.token),
        ),
        Err(e) => match (refusal(&e), email) {
            (Some((status, why)), Some(email)) if !matches!(e, Error::NoSession) => {
                code_form(status, &email, Some(why))
            }
            (Some((status, why)), _) => set_cookie(sign_in_form(status, Some(why)), None),
            (None, _) => layout::failed(e, layout::Section::Drop),
        },
    }
}

/// Sign-out: the session row is deleted (the cookie stops working at once, wherever it
/// was copied to), then the cookie is cleared.
pub async fn logout(
    State(state): State<ConsoleState>,
    ClientAddr(from): ClientAddr,
    headers: HeaderMap,
    _: SameOrigin,
) -> Response {
    if let Some(token) = cookie(&headers, COOKIE) {
        let ended = match state.staff.authenticate(&token).await {
            Ok(Some(who)) => {
                let me = Acting {
                    actor: Actor::Staff(who),
                    from,
                };
                state.staff.sign_out(&me).await
            }
            // Half signed in: forget the session awaiting its code.
            Ok(None) => state.staff.drop_pending(&token).await,
            Err(e) => Err(e),
        };
        if let Err(e) = ended {
            return layout::failed(e, layout::Section::Drop);
        }
    }
    set_cookie(Redirect::to("/console/login").into_response(), None)
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
        let h = headers(&[("cookie", "a=1; paysaga_console=pss_abc; b=2")]);
        assert_eq!(cookie(&h, COOKIE).as_deref(), Some("pss_abc"));
        assert_eq!(cookie(&headers(&[("cookie", "a=1")]), COOKIE), None);
        assert_eq!(
            cookie(&headers(&[("cookie", "paysaga_console=")]), COOKIE),
            None
        );
    }
}
