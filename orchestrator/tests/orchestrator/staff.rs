//! Staff: people sign in as themselves (password, then a TOTP or recovery code), act in
//! roles, and leave an append-only audit trail; each checked in PostgreSQL.

use std::time::Duration;

use orchestrator::Hooks;
use paysaga_common::{
    auth::Audience,
    client::CallError,
    testkit::{rows_as_text, service_token},
};
use paysaga_console::Decision;
use paysaga_contracts::{
    orchestrator::client::OrchestratorClient,
    staff::{
        api::{
            Approval, ApprovalDecided, ApprovalState, CreateStaff, ListApprovals, RefundAnswer,
            SignIn, StaffCreated, StaffRole,
        },
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
pub(crate) fn tool(o: &Orchestrator) -> StaffClient {
    StaffClient::new(&o.url, service_token("operator", Audience::Orchestrator), T)
}

pub(crate) async fn create(o: &Orchestrator, email: &str, role: StaffRole) -> StaffCreated {
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
pub(crate) fn code_now(created: &StaffCreated) -> String {
    let secret = totp::from_base32(&created.totp_secret).expect("base32 secret");
    totp::code_at(&secret, chrono::Utc::now().timestamp() as u64).expect("code")
}

pub(crate) async fn sign_in(
    o: &Orchestrator,
    email: &str,
    code: &str,
) -> Result<String, CallError> {
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
    let used = s
        .count_of(r#"payment_service.staff_recovery_codes WHERE used_at IS NOT NULL"#)
        .await;
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
    let n = s.count_of(r#"payment_service.audit_log"#).await;
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
    let id = o.paid("r-1", "k", res, acct).await;
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
    assert_eq!(
        operator_notes(&s.admin, id).await,
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
pub(crate) struct Route {
    pub(crate) method: &'static str,
    pub(crate) path: String,
    pub(crate) body: Option<serde_json::Value>,
    form: Option<Vec<(&'static str, &'static str)>>,
    pub(crate) console: bool,
    admits: &'static [StaffRole],
}

const ANY: &[StaffRole] = &[StaffRole::Viewer, StaffRole::Operator, StaffRole::Admin];
const ACTS: &[StaffRole] = &[StaffRole::Operator, StaffRole::Admin];
const ADMIN: &[StaffRole] = &[StaffRole::Admin];

pub(crate) fn matrix(payment: Uuid) -> Vec<Route> {
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
    // An API action whose body gives only the matrix's reason.
    let act = |path: String, admits| {
        let body = serde_json::json!({"reason": "matrix"});
        api("POST", path, Some(body), admits)
    };
    let reason = vec![("reason", "matrix")];
    vec![
        api("GET", "/v1/payments?limit=1".into(), None, ANY),
        api("GET", format!("/v1/payments/{payment}/steps"), None, ANY),
        act(format!("/v1/payments/{payment}/resume"), ACTS),
        act(format!("/v1/payments/{payment}/refund"), ACTS),
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
        // Admitted, then 422 INVALID_TOP_UP_KEY: nothing is deposited or asked for.
        api(
            "POST",
            "/v1/top-ups".into(),
            Some(
                serde_json::json!({"member_id": Uuid::new_v4(), "amount": 1, "reason": "matrix", "key": "no spaces allowed"}),
            ),
            ADMIN,
        ),
        api("GET", "/v1/approvals?limit=5".into(), None, ANY),
        // Admitted, then 404 APPROVAL_NOT_FOUND: nothing is decided.
        act("/v1/approvals/999999/approve".into(), ADMIN),
        act("/v1/approvals/999999/reject".into(), ADMIN),
        // The webhook API: admitted, then refused or not found, so nothing changes.
        api(
            "POST",
            "/v1/webhook-endpoints".into(),
            Some(serde_json::json!({"url": "ftp://example.com/", "reason": "matrix"})),
            ADMIN,
        ),
        api("GET", "/v1/webhook-endpoints".into(), None, ANY),
        act(
            format!("/v1/webhook-endpoints/{}/disable", Uuid::new_v4()),
            ADMIN,
        ),
        act(
            format!("/v1/webhook-endpoints/{}/enable", Uuid::new_v4()),
            ADMIN,
        ),
        act(
            format!("/v1/webhook-endpoints/{}/rotate-secret", Uuid::new_v4()),
            ADMIN,
        ),
        api("GET", "/v1/webhook-deliveries?limit=5".into(), None, ANY),
        // Products: admitted, then refused by the order service (no such price or
        // product), so nothing is made.
        api(
            "POST",
            "/v1/products".into(),
            Some(serde_json::json!({"name": "matrix", "price": 0, "units": 1, "reason": "matrix"})),
            ADMIN,
        ),
        api(
            "POST",
            "/v1/products/999999/units".into(),
            Some(serde_json::json!({"count": 1, "reason": "matrix"})),
            ADMIN,
        ),
        act(
            format!("/v1/webhook-deliveries/{}/replay", Uuid::new_v4()),
            ACTS,
        ),
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
        page("/console/approvals".into(), ANY),
        post(
            "/console/approvals/999999/approve".into(),
            vec![("reason", "matrix")],
            ADMIN,
        ),
        post(
            "/console/approvals/999999/reject".into(),
            vec![("reason", "matrix")],
            ADMIN,
        ),
    ]
}

/// What PostgreSQL holds that a staff route could change.
pub(crate) async fn snapshot(pool: &PgPool) -> (Vec<String>, i64, i64) {
    let rows = rows_as_text(
        pool,
        &[
            "payment_service.payments",
            "payment_service.audit_log",
            "payment_service.staff",
            "payment_service.webhook_endpoints",
            "payment_service.webhook_deliveries",
            "payment_service.approvals",
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
    let payment = o.paid("m-1", "k", res, acct).await;
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

/// A staff member signed in through the API: their account and session token.
pub(crate) struct Signed {
    pub(crate) created: StaffCreated,
    pub(crate) token: String,
}

impl Signed {
    pub(crate) async fn new(o: &Orchestrator, email: &str, role: StaffRole) -> Self {
        let created = create(o, email, role).await;
        let token = sign_in(o, email, &code_now(&created))
            .await
            .expect("sign in");
        Signed { created, token }
    }

    pub(crate) fn staff(&self, o: &Orchestrator) -> StaffClient {
        StaffClient::new(&o.url, self.token.clone(), T)
    }

    /// Approves or rejects approval `id`, which must be accepted: the decision.
    pub(crate) async fn decides(
        &self,
        o: &Orchestrator,
        id: i64,
        decision: Decision,
        reason: Option<&str>,
    ) -> ApprovalDecided {
        let staff = self.staff(o);
        let answer = match decision {
            Decision::Approve => staff.approve(id, reason).await,
            Decision::Reject => staff.reject(id, reason).await,
        };
        answer.expect("decided").body
    }

    fn orchestrator(&self, o: &Orchestrator) -> OrchestratorClient {
        OrchestratorClient::new(&o.url, self.token.clone(), T)
    }

    /// Asks for a refund of `payment`; above the four-eyes amount, the approval.
    async fn ask_refund(&self, o: &Orchestrator, payment: Uuid, reason: &str) -> Approval {
        let answer = self
            .orchestrator(o)
            .refund_because(payment, Some(reason))
            .await
            .expect("refund asked for");
        assert_eq!(answer.status, 202);
        match answer.body {
            RefundAnswer::AwaitingApproval(a) => a,
            RefundAnswer::Refunded(p) => panic!("refunded at once: {p:?}"),
        }
    }
}

pub(crate) fn rejected_with<T: std::fmt::Debug>(
    r: &Result<T, CallError>,
    status: u16,
    code: &str,
) -> bool {
    matches!(r, Err(CallError::Rejected { status: s, body }) if *s == status && body.code == code)
}

/// The approval's state and deciding staff member, read from PostgreSQL.
pub(crate) async fn approval_row(pool: &PgPool, id: i64) -> (String, Option<i64>) {
    sqlx::query_as(r#"SELECT state, decided_by FROM payment_service.approvals WHERE id = $1"#)
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("approval row")
}

async fn payment_state(pool: &PgPool, id: Uuid) -> String {
    sqlx::query_scalar(r#"SELECT state FROM payment_service.payments WHERE id = $1"#)
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("payment row")
}

/// The operator notes of a payment's step log.
async fn operator_notes(pool: &PgPool, id: Uuid) -> Vec<Option<String>> {
    sqlx::query_scalar(
        r#"SELECT error FROM payment_service.payment_steps
           WHERE payment_id = $1 AND outcome = 'OPERATOR' ORDER BY seq"#,
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .expect("step log")
}

/// An audit row in brief: (actor, action, outcome, target, detail).
pub(crate) type AuditLine = (String, String, String, Option<String>, Option<String>);

/// The audit rows of `actions`, oldest first.
pub(crate) async fn audit_of(pool: &PgPool, actions: &[&str]) -> Vec<AuditLine> {
    sqlx::query_as(
        r#"SELECT actor, action, outcome, target, detail FROM payment_service.audit_log
           WHERE action = ANY($1) ORDER BY id"#,
    )
    .bind(actions)
    .fetch_all(pool)
    .await
    .expect("audit rows")
}

/// The audit rows expected, each given as (actor, action, outcome, target, detail).
pub(crate) fn audit_rows(v: &[(&str, &str, &str, &str, &str)]) -> Vec<AuditLine> {
    v.iter()
        .map(|&(actor, action, outcome, target, detail)| {
            (
                actor.into(),
                action.into(),
                outcome.into(),
                Some(target.into()),
                Some(detail.into()),
            )
        })
        .collect()
}

/// Four eyes for money: above `STAFF_FOUR_EYES_ABOVE` a refund waits (202, nothing
/// refunded) until an admin other than the one who asked approves it; the approval is
/// then carried out through the saga, the step log naming both; a rejection refunds
/// nothing. Every refusal leaves the approval pending; every step is in the audit trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refund_above_the_four_eyes_amount_waits_for_a_second_admin() {
    let mut s = Stack::start().await;
    let [(acct, res), (other, res2)] = s.two_buyers_with_reservations(["r-1", "r-2"], 2).await;
    let mut c = s.config();
    c.staff.sign_in_burst = std::num::NonZeroU32::new(100).unwrap();
    // The test price (12,900) is above it.
    c.staff.four_eyes_above = 10_000;
    let o = s.orchestrator(c, Hooks::default()).await;
    let id = o.paid("r-1", "k", res, acct).await;
    let id2 = o.paid("r-2", "k", res2, other).await;
    assert_eq!(s.settled(id).await, "COMPLETED");
    assert_eq!(s.settled(id2).await, "COMPLETED");
    let alice = Signed::new(&o, "alice@example.com", StaffRole::Admin).await;
    let bob = Signed::new(&o, "bob@example.com", StaffRole::Admin).await;
    let carol = Signed::new(&o, "carol@example.com", StaffRole::Operator).await;
    let victor = Signed::new(&o, "victor@example.com", StaffRole::Viewer).await;

    // Alice (an admin) asks: 202 with a pending approval, the payment untouched.
    let asked = alice.ask_refund(&o, id, "buyer asked: wrong size").await;
    assert_eq!(asked.state, ApprovalState::Pending);
    assert_eq!(asked.payment_id, Some(id));
    assert_eq!(asked.amount, 12_900);
    assert_eq!(asked.requested_by, Some(alice.created.staff.id));
    assert_eq!(payment_state(&s.admin, id).await, "COMPLETED");
    assert_eq!(
        approval_row(&s.admin, asked.id).await,
        ("PENDING".into(), None)
    );
    // Asking again answers the same approval; no second row.
    let again = alice.ask_refund(&o, id, "asking again").await;
    assert_eq!(again.id, asked.id);
    let rows: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM payment_service.approvals WHERE payment_id = $1"#,
    )
    .bind(id)
    .fetch_one(&s.admin)
    .await
    .unwrap();
    assert_eq!(rows, 1);

    // She cannot approve her own; an operator, a viewer, the operator tools cannot
    // approve at all. It stays pending, the payment untouched.
    let own = alice.staff(&o).approve(asked.id, Some("mine")).await;
    assert!(rejected_with(&own, 403, "SAME_PERSON"), "{own:?}");
    for (who, refused) in [
        ("operator", carol.staff(&o).approve(asked.id, None).await),
        ("viewer", victor.staff(&o).approve(asked.id, None).await),
    ] {
        assert!(
            rejected_with(&refused, 403, "FORBIDDEN_ROLE"),
            "{who}: {refused:?}"
        );
    }
    let tool = tool(&o).approve(asked.id, None).await;
    assert!(rejected_with(&tool, 401, "UNAUTHENTICATED"), "{tool:?}");
    assert_eq!(
        approval_row(&s.admin, asked.id).await,
        ("PENDING".into(), None)
    );
    assert_eq!(payment_state(&s.admin, id).await, "COMPLETED");
    assert_eq!(s.balance(acct).await, 100_000 - 12_900);

    // Everyone sees it pending.
    let pending = victor
        .staff(&o)
        .approvals(&ListApprovals {
            state: Some("PENDING".into()),
            ..Default::default()
        })
        .await
        .expect("list")
        .body;
    assert_eq!(
        pending.approvals.iter().map(|a| a.id).collect::<Vec<_>>(),
        vec![asked.id]
    );

    // Bob approves: refunded through the saga, the ledger paid back, both named.
    let decided = bob
        .decides(&o, asked.id, Decision::Approve, Some("checked the order"))
        .await;
    assert_eq!(decided.approval.state, ApprovalState::Approved);
    assert_eq!(decided.approval.decided_by, Some(bob.created.staff.id));
    assert!(decided.payment.is_some());
    assert_eq!(s.settled(id).await, "REFUNDED");
    assert_eq!(s.balance(acct).await, 100_000, "the ledger paid it back");
    assert_eq!(
        approval_row(&s.admin, asked.id).await,
        ("APPROVED".into(), Some(bob.created.staff.id))
    );
    assert_eq!(
        operator_notes(&s.admin, id).await,
        vec![Some(
            "refund requested by alice@example.com: buyer asked: wrong size; approved by bob@example.com: checked the order"
                .to_owned()
        )]
    );
    // Decided once: a second approval is 409, nothing more happens.
    let twice = bob.staff(&o).approve(asked.id, None).await;
    assert!(rejected_with(&twice, 409, "APPROVAL_DECIDED"), "{twice:?}");
    assert_eq!(operator_notes(&s.admin, id).await.len(), 1);

    // Carol (an operator, within her limit) asks for the other; Bob rejects: nothing
    // refunded, and it cannot be approved afterwards.
    let asked2 = carol.ask_refund(&o, id2, "duplicate order").await;
    let rejected = bob
        .decides(&o, asked2.id, Decision::Reject, Some("not a duplicate"))
        .await;
    assert_eq!(rejected.approval.state, ApprovalState::Rejected);
    assert!(rejected.payment.is_none());
    let late = alice.staff(&o).approve(asked2.id, None).await;
    assert!(rejected_with(&late, 409, "APPROVAL_DECIDED"), "{late:?}");
    assert_eq!(
        approval_row(&s.admin, asked2.id).await,
        ("REJECTED".into(), Some(bob.created.staff.id))
    );
    assert_eq!(payment_state(&s.admin, id2).await, "COMPLETED");
    assert_eq!(s.balance(other).await, 100_000 - 12_900);
    assert!(operator_notes(&s.admin, id2).await.is_empty());

    let (p1, p2) = (id.to_string(), id2.to_string());
    let pending1 = format!("approval {} PENDING", asked.id);
    let approved1 = format!("approval {} APPROVED", asked.id);
    let refunded1 = decided
        .payment
        .as_ref()
        .expect("the payment")
        .payment
        .state
        .clone();
    let pending2 = format!("approval {} PENDING", asked2.id);
    let rejected2 = format!("approval {} REJECTED", asked2.id);
    let (alice, bob, carol) = ("alice@example.com", "bob@example.com", "carol@example.com");
    let refund = [
        "PAYMENT_REFUNDED",
        "REFUND_REQUESTED",
        "REFUND_APPROVED",
        "REFUND_REJECTED",
    ];
    assert_eq!(
        audit_of(&s.admin, &refund).await,
        audit_rows(&[
            (alice, "REFUND_REQUESTED", "DONE", &p1, &pending1),
            (alice, "REFUND_REQUESTED", "DONE", &p1, &pending1),
            (alice, "REFUND_APPROVED", "REFUSED", &p1, "SAME_PERSON"),
            (bob, "REFUND_APPROVED", "DONE", &p1, &approved1),
            (bob, "PAYMENT_REFUNDED", "DONE", &p1, &refunded1),
            (bob, "REFUND_APPROVED", "REFUSED", &p1, "APPROVAL_DECIDED"),
            (carol, "REFUND_REQUESTED", "DONE", &p2, &pending2),
            (bob, "REFUND_REJECTED", "DONE", &p2, &rejected2),
            (alice, "REFUND_APPROVED", "REFUSED", &p2, "APPROVAL_DECIDED"),
        ]),
    );
    s.check_money().await;
}

/// An orchestrator with `STAFF_FOUR_EYES_ABOVE` at `four_eyes_above`, and one
/// COMPLETED payment of the test price (12,900) from an account of 100,000: the account
/// and the payment.
async fn one_completed_payment(four_eyes_above: i64) -> (Stack, Orchestrator, i64, Uuid) {
    one_completed_payment_with(|c| c.staff.four_eyes_above = four_eyes_above).await
}

/// An orchestrator with the test settings as `configure` leaves them, and one COMPLETED
/// payment of the test price (12,900) from an account of 100,000: the account and the
/// payment.
pub(crate) async fn one_completed_payment_with(
    configure: impl FnOnce(&mut orchestrator::Config),
) -> (Stack, Orchestrator, i64, Uuid) {
    let mut s = Stack::start().await;
    let (acct, res) = s.buyer_with_reservation("r-1", 100_000, 2).await;
    let mut c = s.config();
    configure(&mut c);
    let o = s.orchestrator(c, Hooks::default()).await;
    let id = o.paid("r-1", "k", res, acct).await;
    assert_eq!(s.settled(id).await, "COMPLETED");
    (s, o, acct, id)
}

/// Two admins approving the same refund at once: one wins (200), the other is told it
/// was decided (409); one refund is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_admins_approving_at_once_make_one_refund() {
    let (s, o, acct, id) = one_completed_payment(10_000).await;
    let carol = Signed::new(&o, "carol@example.com", StaffRole::Operator).await;
    let alice = Signed::new(&o, "alice@example.com", StaffRole::Admin).await;
    let bob = Signed::new(&o, "bob@example.com", StaffRole::Admin).await;
    let asked = carol.ask_refund(&o, id, "buyer asked").await;

    let (a, b) = (alice.staff(&o), bob.staff(&o));
    let (ra, rb) = tokio::join!(a.approve(asked.id, None), b.approve(asked.id, None));
    let won = [&ra, &rb].into_iter().filter(|r| r.is_ok()).count();
    let lost = [&ra, &rb]
        .into_iter()
        .filter(|r| rejected_with(*r, 409, "APPROVAL_DECIDED"))
        .count();
    assert_eq!((won, lost), (1, 1), "{ra:?} {rb:?}");
    assert_eq!(s.settled(id).await, "REFUNDED");
    assert_eq!(s.balance(acct).await, 100_000);
    assert_eq!(operator_notes(&s.admin, id).await.len(), 1);
    let credits = s
        .count_of(r#"account_service.transactions WHERE kind = 'CREDIT'"#)
        .await;
    assert_eq!(credits, 1);
    let (state, decided_by) = approval_row(&s.admin, asked.id).await;
    assert_eq!(state, "APPROVED");
    let winner = if ra.is_ok() { &alice } else { &bob };
    assert_eq!(decided_by, Some(winner.created.staff.id));
    let refunds = s
        .count_of(
            r#"payment_service.audit_log WHERE action = 'PAYMENT_REFUNDED' AND outcome = 'DONE'"#,
        )
        .await;
    assert_eq!(refunds, 1);
    s.check_money().await;
}

/// At or below the four-eyes amount a refund is carried out at once, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refund_at_the_four_eyes_amount_is_carried_out_at_once() {
    // The test price.
    let (s, o, _, id) = one_completed_payment(12_900).await;
    let carol = Signed::new(&o, "carol@example.com", StaffRole::Operator).await;
    let answer = carol
        .orchestrator(&o)
        .refund_because(id, Some("buyer asked"))
        .await
        .expect("refund");
    assert_eq!(answer.status, 200);
    assert!(answer.body.refunded().is_some(), "{:?}", answer.body);
    assert_eq!(s.settled(id).await, "REFUNDED");
    let approvals = s.count_of(r#"payment_service.approvals"#).await;
    assert_eq!(approvals, 0);
}

/// The console: an operator's refund above the amount says it awaits approval; the
/// approvals page offers the decision to an admin other than the one who asked, and
/// her approval refunds the payment.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_asks_for_an_approval_and_another_admin_gives_it() {
    let (s, o, acct, id) = one_completed_payment(10_000).await;
    let carol = create(&o, "carol@example.com", StaffRole::Operator).await;
    let alice = create(&o, "alice@example.com", StaffRole::Admin).await;
    let http = no_redirects();
    let as_carol = console_sign_in(&http, &o.url, "carol@example.com", &code_now(&carol)).await;
    let as_alice = console_sign_in(&http, &o.url, "alice@example.com", &code_now(&alice)).await;
    // A console form posted with its reason: done, and redirected to what it did.
    let post = |path: String, cookie: &str, reason: &str| {
        let sent = http
            .post(format!("{}{path}", o.url))
            .header(header::ORIGIN, &o.url)
            .header(header::COOKIE, cookie)
            .header(header::CONTENT_TYPE, FORM)
            .body(form(&[("reason", reason)]))
            .send();
        async move {
            let done = sent.await.expect("posted");
            assert_eq!(done.status(), StatusCode::SEE_OTHER);
            done
        }
    };
    let page = |cookie: &str| {
        http.get(format!("{}/console/approvals", o.url))
            .header(header::COOKIE, cookie)
            .send()
    };

    let asked = post(
        format!("/console/payments/{id}/refund"),
        &as_carol,
        "wrong size",
    )
    .await;
    assert_eq!(
        asked.headers()[header::LOCATION],
        format!("/console/payments/{id}?done=approval").as_str()
    );
    assert_eq!(payment_state(&s.admin, id).await, "COMPLETED");
    let approval: i64 =
        sqlx::query_scalar(r#"SELECT id FROM payment_service.approvals WHERE state = 'PENDING'"#)
            .fetch_one(&s.admin)
            .await
            .expect("one pending approval");

    // The operator sees it, without the decision; the admin with it.
    let seen = page(&as_carol).await.unwrap().text().await.unwrap();
    assert!(seen.contains(&format!("data-id=\"{approval}\"")), "{seen}");
    assert!(!seen.contains(&format!("approve-{approval}")), "{seen}");
    let seen = page(&as_alice).await.unwrap().text().await.unwrap();
    assert!(seen.contains(&format!("approve-{approval}")), "{seen}");

    post(
        format!("/console/approvals/{approval}/approve"),
        &as_alice,
        "checked",
    )
    .await;
    assert_eq!(s.settled(id).await, "REFUNDED");
    assert_eq!(s.balance(acct).await, 100_000);
    assert_eq!(
        operator_notes(&s.admin, id).await,
        vec![Some(
            "refund requested by carol@example.com: wrong size; approved by alice@example.com: checked"
                .to_owned()
        )]
    );
}

/// The rules hold in PostgreSQL too, for the service's own role (which may read, add and
/// update approvals): one pending approval per payment; whoever asked never decides; a
/// decided approval names who decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_database_keeps_one_pending_approval_per_payment_and_two_people() {
    let (s, _o, _, id) = one_completed_payment(10_000).await;
    let app = PgPool::connect(&s.db.role_url("payment_app"))
        .await
        .expect("payment_app");
    let ask = r#"INSERT INTO payment_service.approvals
                   (payment_id, amount, requested_by, requested_by_name)
                 VALUES ($1, 12900, 7, 'alice@example.com') RETURNING id"#;
    let first: i64 = sqlx::query_scalar(ask)
        .bind(id)
        .fetch_one(&app)
        .await
        .expect("the service may ask");
    let constraint = |e: sqlx::Error| {
        e.as_database_error()
            .and_then(|d| d.constraint())
            .map(str::to_owned)
    };
    let second = sqlx::query_scalar::<_, i64>(ask)
        .bind(id)
        .fetch_one(&app)
        .await;
    assert_eq!(
        second.map_err(constraint).err().flatten().as_deref(),
        Some("approvals_one_pending_refund")
    );
    let decide = |by: Option<i64>| {
        sqlx::query(
            r#"UPDATE payment_service.approvals
               SET state = 'APPROVED', decided_by = $2, decided_by_name = 'x', decided_at = now()
               WHERE id = $1"#,
        )
        .bind(first)
        .bind(by)
        .execute(&app)
    };
    for (by, refused_by) in [
        (Some(7), "approvals_two_people"),
        (None, "approvals_decided_when_not_pending"),
    ] {
        let e = decide(by).await.expect_err("refused");
        assert_eq!(constraint(e).as_deref(), Some(refused_by));
    }
    decide(Some(8)).await.expect("another person decides");
    // Decided, never removed: the service may not delete an approval.
    let e = sqlx::query(r#"DELETE FROM payment_service.approvals WHERE id = $1"#)
        .bind(first)
        .execute(&app)
        .await
        .expect_err("the service deletes no approval");
    assert_eq!(
        e.as_database_error().and_then(|d| d.code()).as_deref(),
        Some("42501"),
        "{e}"
    );
    // Decided, it no longer blocks a new request.
    sqlx::query_scalar::<_, i64>(ask)
        .bind(id)
        .fetch_one(&app)
        .await
        .expect("a new request once decided");
}

/// The operator tools may ask for a refund above the amount (it waits like anyone's),
/// never decide one; any admin may approve what they asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operator_tools_ask_and_a_person_approves() {
    let (s, o, acct, id) = one_completed_payment(10_000).await;
    let answer = o.operator().refund(id).await.expect("refund asked for");
    assert_eq!(answer.status, 202);
    let asked = answer.body.awaiting().expect("awaits approval").clone();
    assert_eq!(asked.requested_by, None);
    assert_eq!(asked.requested_by_name, "service:operator");
    assert_eq!(payment_state(&s.admin, id).await, "COMPLETED");
    let alice = Signed::new(&o, "alice@example.com", StaffRole::Admin).await;
    alice.decides(&o, asked.id, Decision::Approve, None).await;
    assert_eq!(s.settled(id).await, "REFUNDED");
    assert_eq!(s.balance(acct).await, 100_000);
    assert_eq!(
        operator_notes(&s.admin, id).await,
        vec![Some(
            "refund requested by service:operator; approved by alice@example.com".to_owned()
        )]
    );
}
