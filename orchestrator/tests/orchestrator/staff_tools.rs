//! Outside development mode staff routes are for people: the operator tools' service
//! credential makes the first admin and nothing else; every other call of it is refused
//! and changes nothing in PostgreSQL.

use paysaga_common::client::CallError;
use paysaga_contracts::staff::api::{CreateStaff, StaffRole};
use reqwest::header;

use crate::staff::{code_now, matrix, one_completed_payment_with, sign_in, snapshot, tool};

const PASSWORD: &str = "plum-orbit-canyon-47";

fn new_staff(email: &str) -> CreateStaff {
    CreateStaff {
        email: email.into(),
        password: PASSWORD.into(),
        role: StaffRole::Admin,
        reason: "runs the drops".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outside_development_the_tools_credential_only_makes_the_first_admin() {
    let (s, o, _, payment) = one_completed_payment_with(|c| c.staff.tools_act = false).await;

    // The first admin, made by the tools.
    let first = tool(&o)
        .create(&new_staff("first@example.com"))
        .await
        .expect("the first admin")
        .body;
    // A second: the tools may no longer.
    let before = snapshot(&s.admin).await;
    let second = tool(&o).create(&new_staff("second@example.com")).await;
    assert!(
        matches!(&second, Err(CallError::Rejected { status: 403, body }) if body.code == "PEOPLE_ONLY"),
        "{second:?}"
    );
    assert_eq!(snapshot(&s.admin).await, before, "nothing written");

    // Every staff route of the API refuses the tools' credential and changes nothing.
    let token = paysaga_common::testkit::service_token(
        "operator",
        paysaga_common::auth::Audience::Orchestrator,
    );
    let http = reqwest::Client::new();
    for route in matrix(payment).into_iter().filter(|r| !r.console) {
        let url = format!("{}{}", o.url, route.path);
        let mut req = match route.method {
            "GET" => http.get(&url),
            _ => http.post(&url).header(header::ORIGIN, &o.url),
        };
        req = req.bearer_auth(&token);
        if let Some(body) = &route.body {
            req = req.json(body);
        }
        let before = snapshot(&s.admin).await;
        let answer = req.send().await.expect("send");
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap_or_default();
        let what = format!("{} {}: {status} {text:.200}", route.method, route.path);
        // Routes for people only do not know the credential (401); the ones that took
        // the tools in development mode refuse them by name (403 PEOPLE_ONLY).
        assert!(
            status == 401 || (status == 403 && text.contains("PEOPLE_ONLY")),
            "{what}"
        );
        assert_eq!(
            snapshot(&s.admin).await,
            before,
            "refused, yet changed: {what}"
        );
    }

    // The first admin, a person, makes the next.
    let token = sign_in(&o, "first@example.com", &code_now(&first))
        .await
        .expect("sign in");
    paysaga_contracts::staff::client::StaffClient::new(
        &o.url,
        token,
        std::time::Duration::from_secs(30),
    )
    .create(&new_staff("second@example.com"))
    .await
    .expect("an admin makes the second");
}
