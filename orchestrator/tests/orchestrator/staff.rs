//! Staff: people sign in as themselves (password, then a TOTP or recovery code), act in
//! roles, and leave an append-only audit trail; each checked in PostgreSQL.

use std::time::Duration;

use orchestrator::Hooks;
use paysaga_common::{
    auth::Audience,
    client::CallError,
    testkit::{rows_as_text, service_token},
};
use paysaga_contracts::{
    orchestrator::client::OrchestratorClient,
    staff::{
        api::{CreateStaff, SignIn, StaffCreated, StaffRole},
        client::StaffClient,
    },
};
use paysaga_staff::totp;
use reqwest::{header, redirect, StatusCode};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{Orchestrator, Stack};

const T: Duration = Duration::from_secs(30);
const PASSWORD: &str = "plum-orbit-canyon-47";

/// The operator tools' service credential, which may create staff accounts.
fn tool(o: &Orchestrator) -> StaffClient {
    StaffClient::new(&o.url, service_token("operator", Audience::Orchestrator), T)
}

async fn create(o: &Orchestrator, email: &str, role: StaffRole) -> StaffCreated {
    tool(o)
        .create(&CreateStaff {
            email: email.into(),
            password: PASSWORD.into(),
            role,
            reason: "joins the drop team".into(),
        })
        .await
        .expect("create staff")
        .body
}

/// The person's TOTP code now.
fn code_now(created: &StaffCreated) -> String {
    let secret = totp::from_base32(&created.totp_secret).expect("base32 secret");
    totp::code_at(&secret, chrono::Utc::now().timestamp() as u64).expect("code")
}

async fn sign_in(o: &Orchestrator, email: &str, code: &str) -> Result<String, CallError> {
    StaffClient::new(&o.url, "none", T)
        .sign_in(&SignIn {
            email: email.into(),
            password: PASSWORD.into(),
            code: code.into(),
        })
        .await
        .map(|a| a.body.token)
}

fn refused_with(r: &Result<String, CallError>, status: u16, code: &str) -> bool {
    match r {
        Err(CallError::Rejected { status: s, body }) => *s == status && body.code == code,
        // The client takes a 429 as "ask again later", without its body.
        Err(e) => status == 429 && e.status() == Some(429),
        Ok(_) => false,
    }
}

async fn sessions(pool: &PgPool, email: &str) -> Vec<String> {
    sqlx::query_scalar(
        r#"SELECT s.stage FROM payment_service.staff_sessions s
           JOIN payment_service.staff st ON st.id = s.staff_id
           WHERE st.email = $1 ORDER BY s.created_at"#,
    )
    .bind(email)
    .fetch_all(pool)
    .await
    .expect("sessions")
}

/// Every audit row as (actor, action, outcome), oldest first.
async fn audit(pool: &PgPool) -> Vec<(String, String, String)> {
    sqlx::query_as(r#"SELECT actor, action, outcome FROM payment_service.audit_log ORDER BY id"#)
        .fetch_all(pool)
        .await
        .expect("audit rows")
}

fn rows(v: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    v.iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_person_signs_in_with_password_and_second_factor_and_sign_out_ends_the_session_at_once() {
    let s = Stack::start().await;
    let o = s.orchestrator(s.config(), Hooks::default()).await;
    let alice = create(&o, "Alice@Example.com", StaffRole::Admin).await;
    assert_eq!(alice.staff.email, "alice@example.com");
    assert_eq!(alice.recovery_codes.len(), totp::RECOVERY_CODES);
    assert!(alice.otpauth_url.starts_with("otpauth://totp/"));
    let stored: (String, i64) = sqlx::query_as(
        r#"SELECT password_hash, (SELECT COUNT(*) FROM payment_service.staff_recovery_codes)
           FROM payment_service.staff WHERE email = 'alice@example.com'"#,
    )
    .fetch_one(&s.admin)
    .await
    .unwrap();
    assert!(stored.0.starts_with("$argon2id$"), "hashed: {}", stored.0);
    assert_eq!(stored.1, totp::RECOVERY_CODES as i64);

    // A wrong password, then a wrong code: refused alike, no session.
    let wrong = StaffClient::new(&o.url, "none", T)
        .sign_in(&SignIn {
            email: "alice@example.com".into(),
            password: "not-her-password-1".into(),
            code: code_now(&alice),
        })
        .await
        .map(|a| a.body.token);
    assert!(
        refused_with(&wrong, 401, "STAFF_SIGN_IN_FAILED"),
        "{wrong:?}"
    );
    let wrong = sign_in(&o, "alice@example.com", "000000").await;
    let wrong = match wrong {
        // One time in a million the guess is her code; then it is simply a sign-in.
        Ok(_) => sign_in(&o, "alice@example.com", "000000").await,
        other => other,
    };
    assert!(
        refused_with(&wrong, 401, "STAFF_SIGN_IN_FAILED"),
        "{wrong:?}"
    );
    assert!(sessions(&s.admin, "alice@example.com")
        .await
        .iter()
        .all(|st| st == "SECOND_FACTOR"));

    // The right code signs in; the same code again is refused (each step's code once).
    let code = code_now(&alice);
    let token = sign_in(&o, "alice@example.com", &code)
        .await
        .expect("sign in");
    assert!(token.starts_with("pss_"));
    let again = sign_in(&o, "alice@example.com", &code).await;
    assert!(
        refused_with(&again, 401, "STAFF_SIGN_IN_FAILED"),
        "{again:?}"
    );
    // A recovery code works once.
    let rc = &alice.recovery_codes[0];
    let by_recovery = sign_in(&o, "alice@example.com", rc)
        .await
        .expect("recovery code");
    let reused = sign_in(&o, "alice@example.com", rc).await;
    assert!(
        refused_with(&reused, 401, "STAFF_SIGN_IN_FAILED"),
        "{reused:?}"
    );
    let used: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM payment_service.staff_recovery_codes WHERE used_at IS NOT NULL"#,
    )
    .fetch_one(&s.admin)
    .await
    .unwrap();
    assert_eq!(used, 1);
    let stages = sessions(&s.admin, "alice@example.com").await;
    assert_eq!(
        stages.iter().filter(|st| *st == "ACTIVE").count(),
        2,
        "{stages:?}"
    );
    let stored_tokens: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM payment_service.staff_sessions WHERE token_hash = $1"#,
    )
    .bind(token.as_bytes())
    .fetch_one(&s.admin)
    .await
    .unwrap();
    assert_eq!(stored_tokens, 0, "only the token's hash is stored");

    // The session opens the operator API; sign-out ends it at once.
    let as_alice = OrchestratorClient::new(&o.url, token.clone(), T);
    as_alice.list("limit=1").await.expect("signed in");
    StaffClient::new(&o.url, token.clone(), T)
        .sign_out()
        .await
        .expect("sign out");
    let stages = sessions(&s.admin, "alice@example.com").await;
    assert_eq!(
        stages.iter().filter(|st| *st == "ACTIVE").count(),
        1,
        "{stages:?}"
    );
    let after = as_alice.list("limit=1").await;
    assert!(
        matches!(&after, Err(CallError::Rejected { status: 401, body }) if body.code == "UNAUTHENTICATED"),
        "{after:?}"
    );
    OrchestratorClient::new(&o.url, by_recovery, T)
        .list("limit=1")
        .await
        .expect("her other session still works");

    assert_eq!(
        audit(&s.admin).await,
        rows(&[
            ("service:operator", "STAFF_CREATED", "DONE"),
            ("alice@example.com", "SIGN_IN_FAILED", "REFUSED"),
            ("alice@example.com", "SIGN_IN_FAILED", "REFUSED"),
            ("alice@example.com", "SIGN_IN", "DONE"),
            ("alice@example.com", "SIGN_IN_FAILED", "REFUSED"),
            ("alice@example.com", "SIGN_IN", "DONE"),
            ("alice@example.com", "SIGN_IN_FAILED", "REFUSED"),
            ("alice@example.com", "SIGN_OUT", "DONE"),
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sign_in_attempts_are_limited_per_email() {
    let s = Stack::start().await;
    let mut c = s.config();
    c.staff.sign_in_burst = std::num::NonZeroU32::new(3).unwrap();
    c.staff.sign_in_period = Duration::from_secs(3600);
    let o = s.orchestrator(c, Hooks::default()).await;
    let bob = create(&o, "bob@example.com", StaffRole::Viewer).await;
    for _ in 0..3 {
        let r = sign_in(&o, "bob@example.com", "000001").await;
        assert!(r.is_err());
    }
    // Past the limit even the right code is refused, before the password is checked.
    let r = sign_in(&o, "bob@example.com", &code_now(&bob)).await;
    assert!(refused_with(&r, 429, "TOO_MANY_SIGN_IN_ATTEMPTS"), "{r:?}");
    assert!(sessions(&s.admin, "bob@example.com")
        .await
        .iter()
        .all(|st| st == "SECOND_FACTOR"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_service_role_can_add_audit_rows_but_never_change_or_delete_one() {
    let s = Stack::start().await;
    let o = s.orchestrator(s.config(), Hooks::default()).await;
    create(&o, "carol@example.com", StaffRole::Operator).await;
    let app = PgPool::connect(&s.db.role_url("payment_app"))
        .await
        .expect("payment_app");
    sqlx::query(
        r#"INSERT INTO payment_service.audit_log (actor, action, outcome) VALUES ('x', 'SIGN_OUT', 'DONE')"#,
    )
    .execute(&app)
    .await
    .expect("the service may append");
    for sql in [
        r#"UPDATE payment_service.audit_log SET reason = 'rewritten'"#,
        r#"DELETE FROM payment_service.audit_log"#,
        r#"TRUNCATE payment_service.audit_log"#,
    ] {
        let e = sqlx::query(sql).execute(&app).await.expect_err(sql);
        let code = e
            .as_database_error()
            .and_then(|d| d.code())
            .map(|c| c.into_owned());
        assert_eq!(code.as_deref(), Some("42501"), "{sql}: {e}");
    }
    let n: i64 = sqlx::query_scalar(r#"SELECT COUNT(*) FROM payment_service.audit_log"#)
        .fetch_one(&s.admin)
        .await
        .unwrap();
    assert_eq!(n, 2);
}

/// A person signed in at the console: the session cookie, through the real forms.
async fn console_sign_in(http: &reqwest::Client, base: &str, email: &str, code: &str) -> String {
    let origin = base.to_owned();
    let r = http
        .post(format!("{base}/console/login"))
        .header(header::ORIGIN, &origin)
        .header(header::CONTENT_TYPE, FORM)
        .body(form(&[("email", email), ("password", PASSWORD)]))
        .send()
        .await
        .expect("password step");
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "password step");
    let pending = set_cookie(&r).expect("pending cookie");
    let r = http
        .post(format!("{base}/console/login/code"))
        .header(header::ORIGIN, &origin)
        .header(header::COOKIE, &pending)
        .header(header::CONTENT_TYPE, FORM)
        .body(form(&[("code", code)]))
        .send()
        .await
        .expect("code step");
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "code step");
    assert_eq!(r.headers()[header::LOCATION], "/console/drop");
    set_cookie(&r).expect("session cookie")
}

/// `name=value` of a response's `Set-Cookie`, if it sets one (not a removal).
fn set_cookie(r: &reqwest::Response) -> Option<String> {
    let v = r.headers().get(header::SET_COOKIE)?.to_str().ok()?;
    let pair = v.split(';').next()?.trim().to_owned();
    (!pair.ends_with('=')).then_some(pair)
}

const FORM: &str = "application/x-www-form-urlencoded";

/// `pairs` as a form body (form-urlencoded, as a query string is).
fn form(pairs: &[(&str, &str)]) -> String {
    paysaga_contracts::query_string(pairs.iter().map(|&(k, v)| (k, Some(v.to_owned()))))
        .expect("a form body")
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(redirect::Policy::none())
        .timeout(T)
        .build()
        .unwrap()
}

/// The headline: a person signs in at the console with password and TOTP, refunds a
/// payment with a reason, and the audit row, the step log and the ledger agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_console_refund_names_the_person_in_the_audit_trail_the_step_log_and_agrees_with_the_ledger(
) {
    let mut s = Stack::start().await;
    let (acct, res) = s.buyer_with_reservation("r-1", 100_000, 2).await;
    let o = s.orchestrator(s.config(), Hooks::default()).await;
    let id = o.pay("r-1", "k", res, acct).await.expect("pay").payment.id;
    assert_eq!(s.settled(id).await, "COMPLETED");
    let alice = create(&o, "alice@example.com", StaffRole::Admin).await;
    let http = no_redirects();
    let cookie = console_sign_in(&http, &o.url, "alice@example.com", &code_now(&alice)).await;

    let refund = format!("{}/console/payments/{id}/refund", o.url);
    let confirm = http
        .get(&refund)
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(confirm.status(), StatusCode::OK);
    assert!(confirm.text().await.unwrap().contains("name=\"reason\""));
    let done = http
        .post(&refund)
        .header(header::ORIGIN, &o.url)
        .header(header::COOKIE, &cookie)
        .header(header::CONTENT_TYPE, FORM)
        .body(form(&[("reason", "buyer asked: wrong size")]))
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    assert_eq!(s.settled(id).await, "REFUNDED");

    let row: AuditRow = sqlx::query_as(
        r#"SELECT staff_id, actor, host(client_addr), action, target, reason, outcome
               FROM payment_service.audit_log WHERE action = 'PAYMENT_REFUNDED'"#,
    )
    .fetch_one(&s.admin)
    .await
    .expect("one refund row");
    assert_eq!(row.0, Some(alice.staff.id));
    assert_eq!(row.1, "alice@example.com");
    assert_eq!(row.2.as_deref(), Some("127.0.0.1"));
    assert_eq!(row.4, Some(id.to_string()));
    assert_eq!(row.5.as_deref(), Some("buyer asked: wrong size"));
    assert_eq!(row.6, "DONE");
    let notes: Vec<Option<String>> = sqlx::query_scalar(
        r#"SELECT error FROM payment_service.payment_steps
           WHERE payment_id = $1 AND outcome = 'OPERATOR'"#,
    )
    .bind(id)
    .fetch_all(&s.admin)
    .await
    .expect("step log");
    assert_eq!(
        notes,
        vec![Some(
            "refund requested by alice@example.com: buyer asked: wrong size".to_owned()
        )]
    );
    assert_eq!(s.balance(acct).await, 100_000, "the ledger paid it back");
    s.check_money().await;
}

/// staff_id, actor, client address, action, target, reason, outcome.
type AuditRow = (
    Option<i64>,
    String,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
    String,
);

/// One staff route, and the roles it admits.
struct Route {
    method: &'static str,
    path: String,
    body: Option<serde_json::Value>,
    form: Option<Vec<(&'static str, &'static str)>>,
    console: bool,
    admits: &'static [StaffRole],
}

const ANY: &[StaffRole] = &[StaffRole::Viewer, StaffRole::Operator, StaffRole::Admin];
const ACTS: &[StaffRole] = &[StaffRole::Operator, StaffRole::Admin];
const ADMIN: &[StaffRole] = &[StaffRole::Admin];

fn matrix(payment: Uuid) -> Vec<Route> {
    let api = |method, path: String, body: Option<serde_json::Value>, admits| Route {
        method,
        path,
        body,
        form: None,
        console: false,
        admits,
    };
    let page = |path: String, admits| Route {
        method: "GET",
        path,
        body: None,
        form: None,
        console: true,
        admits,
    };
    let post = |path: String, form: Vec<(&'static str, &'static str)>, admits| Route {
        method: "POST",
        path,
        body: None,
        form: Some(form),
        console: true,
        admits,
    };
    let reason = vec![("reason", "matrix")];
    vec![
        api("GET", "/v1/payments?limit=1".into(), None, ANY),
        api("GET", format!("/v1/payments/{payment}/steps"), None, ANY),
        api(
            "POST",
            format!("/v1/payments/{payment}/resume"),
            Some(serde_json::json!({"reason": "matrix"})),
            ACTS,
        ),
        api(
            "POST",
            format!("/v1/payments/{payment}/refund"),
            Some(serde_json::json!({"reason": "matrix"})),
            ACTS,
        ),
        api(
            "POST",
            "/v1/staff".into(),
            // Admitted, then refused for its weak password: nothing is created.
            Some(
                serde_json::json!({"email": "new@example.com", "password": "short", "role": "VIEWER", "reason": "matrix"}),
            ),
            ADMIN,
        ),
        api("GET", "/v1/audit?limit=5".into(), None, ANY),
        page("/console/drop".into(), ANY),
        page("/console/payments".into(), ANY),
        page(format!("/console/payments/{payment}"), ANY),
        page(format!("/console/payments/{payment}/resume"), ACTS),
        page(format!("/console/payments/{payment}/refund"), ACTS),
        post(
            format!("/console/payments/{payment}/resume"),
            reason.clone(),
            ACTS,
        ),
        post(
            format!("/console/payments/{payment}/refund"),
            reason.clone(),
            ACTS,
        ),
        page("/console/webhooks".into(), ANY),
        page(format!("/console/webhooks/{}/replay", Uuid::new_v4()), ACTS),
        post(
            format!("/console/webhooks/{}/replay", Uuid::new_v4()),
            reason,
            ACTS,
        ),
        page("/console/audit".into(), ANY),
    ]
}

/// What PostgreSQL holds that a staff route could change.
async fn snapshot(pool: &PgPool) -> (Vec<String>, i64, i64) {
    let rows = rows_as_text(
        pool,
        &[
            "payment_service.payments",
            "payment_service.audit_log",
            "payment_service.staff",
            "payment_service.webhook_endpoints",
            "payment_service.webhook_deliveries",
        ],
    )
    .await;
    let sessions: i64 =
        sqlx::query_scalar(r#"SELECT COUNT(*) FROM payment_service.staff_sessions"#)
            .fetch_one(pool)
            .await
            .unwrap();
    let steps: i64 = sqlx::query_scalar(r#"SELECT COUNT(*) FROM payment_service.payment_steps"#)
        .fetch_one(pool)
        .await
        .unwrap();
    (rows, sessions, steps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_staff_route_admits_exactly_its_roles_and_a_refused_call_changes_nothing() {
    let mut s = Stack::start().await;
    let (acct, res) = s.buyer_with_reservation("m-1", 100_000, 2).await;
    let mut c = s.config();
    // Six sign-ins from one address.
    c.staff.sign_in_burst = std::num::NonZeroU32::new(100).unwrap();
    let o = s.orchestrator(c, Hooks::default()).await;
    // A payment that is FAILED: resume and refund are refused by the saga, not by role.
    s.release_hold(res).await;
    let payment = o.pay("m-1", "k", res, acct).await.expect("pay").payment.id;
    s.settled(payment).await;

    let http = no_redirects();
    let mut people = Vec::new();
    for (email, role) in [
        ("viewer@example.com", StaffRole::Viewer),
        ("operator@example.com", StaffRole::Operator),
        ("admin@example.com", StaffRole::Admin),
    ] {
        let created = create(&o, email, role).await;
        let token = sign_in(&o, email, &code_now(&created))
            .await
            .expect("sign in");
        let cookie = console_sign_in(&http, &o.url, email, &created.recovery_codes[0]).await;
        people.push((Some(role), token, cookie));
    }
    people.push((None, String::new(), String::new()));

    for route in matrix(payment) {
        for (role, token, cookie) in &people {
            let url = format!("{}{}", o.url, route.path);
            let mut req = match route.method {
                "GET" => http.get(&url),
                _ => http.post(&url).header(header::ORIGIN, &o.url),
            };
            if route.console {
                if role.is_some() {
                    req = req.header(header::COOKIE, cookie);
                }
                if let Some(form) = &route.form {
                    req = req
                        .header(header::CONTENT_TYPE, FORM)
                        .body(self::form(form));
                }
            } else {
                if role.is_some() {
                    req = req.bearer_auth(token);
                }
                if let Some(body) = &route.body {
                    req = req.json(body);
                }
            }
            let admitted = role.is_some_and(|r| route.admits.contains(&r));
            let before = snapshot(&s.admin).await;
            let answer = req.send().await.expect("send");
            let status = answer.status();
            let text = answer.text().await.unwrap_or_default();
            let what = format!(
                "{} {} as {role:?}: {status} {text:.200}",
                route.method, route.path
            );
            if admitted {
                assert!(
                    ![401, 403].contains(&status.as_u16()) && !status.is_redirection(),
                    "admitted: {what}"
                );
                continue;
            }
            match (role, route.console) {
                (None, false) => {
                    assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}");
                    assert!(text.contains("UNAUTHENTICATED"), "{what}");
                }
                (None, true) => assert!(status.is_redirection(), "{what}"),
                (Some(_), _) => {
                    assert_eq!(status, StatusCode::FORBIDDEN, "{what}");
                    assert!(text.contains("FORBIDDEN_ROLE"), "{what}");
                }
            }
            assert_eq!(
                snapshot(&s.admin).await,
                before,
                "refused, yet changed: {what}"
            );
        }
    }
}
