//! Staff TOTP secrets at rest: sealed when an account is made, a plaintext one (stored
//! before sealing) sealed at start-up with its plaintext cleared, and a key that opens
//! none of them stops the start; read from PostgreSQL.

use orchestrator::{AppState, Hooks};
use paysaga_contracts::staff::api::StaffRole;
use paysaga_staff::{secrets::SecretKey, totp};
use sqlx::PgPool;

use crate::{
    staff::{code_now, create, sign_in},
    support::Stack,
};

/// (plaintext secret, sealed secret) of the person with `email`.
async fn stored(pool: &PgPool, email: &str) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    sqlx::query_as(
        r#"SELECT totp_secret, totp_secret_sealed FROM payment_service.staff WHERE email = $1"#,
    )
    .bind(email)
    .fetch_one(pool)
    .await
    .expect("staff row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn totp_secrets_are_sealed_at_rest_and_old_plaintext_ones_at_start() {
    let s = Stack::start().await;
    let key = SecretKey::generate();
    let mut config = s.config();
    config.staff.secret_key = key.clone();
    let o = s.orchestrator(config.clone(), Hooks::default()).await;
    let created = create(&o, "alice@example.com", StaffRole::Admin).await;
    let secret = totp::from_base32(&created.totp_secret).expect("base32");

    let (plain, sealed) = stored(&s.admin, "alice@example.com").await;
    assert_eq!(plain, None, "no plaintext secret is stored");
    let sealed = sealed.expect("sealed secret");
    assert!(
        !sealed.windows(secret.len()).any(|w| w == secret.as_slice()),
        "the secret's bytes are not in the stored value"
    );
    assert_eq!(
        key.open("alice@example.com", &sealed).expect("opens"),
        secret
    );
    assert!(
        key.open("bob@example.com", &sealed).is_err(),
        "bound to its person"
    );
    sign_in(&o, "alice@example.com", &code_now(&created))
        .await
        .expect("signs in with the sealed secret");
    drop(o);

    // A row as it was stored before sealing: the plaintext secret only.
    sqlx::query(
        r#"UPDATE payment_service.staff SET totp_secret = $2, totp_secret_sealed = NULL
           WHERE email = $1"#,
    )
    .bind("alice@example.com")
    .bind(&secret)
    .execute(&s.admin)
    .await
    .expect("plant plaintext");
    // The database refuses a row with both forms, or neither.
    let both = sqlx::query(
        r#"UPDATE payment_service.staff SET totp_secret_sealed = '\x01'::BYTEA
           WHERE email = $1"#,
    )
    .bind("alice@example.com")
    .execute(&s.admin)
    .await
    .expect_err("one form only");
    assert!(both.to_string().contains("staff_one_totp_secret"), "{both}");

    let o = s.orchestrator(config.clone(), Hooks::default()).await;
    let (plain, sealed) = stored(&s.admin, "alice@example.com").await;
    assert_eq!(plain, None, "the plaintext is cleared at start");
    assert_eq!(
        key.open("alice@example.com", &sealed.expect("sealed at start"))
            .expect("opens"),
        secret
    );
    // A code of a later step: the one used above is spent.
    let later = totp::code_at(&secret, chrono::Utc::now().timestamp() as u64 + 30).expect("code");
    sign_in(&o, "alice@example.com", &later)
        .await
        .expect("signs in after sealing");
    drop(o);

    // Another key opens none of the stored secrets: the service does not start.
    let mut wrong = config;
    wrong.staff.secret_key = SecretKey::generate();
    let refused = match AppState::connect(&wrong, Hooks::default()).await {
        Ok(_) => panic!("started with a key that opens no stored secret"),
        Err(e) => format!("{e:#}"),
    };
    assert!(refused.contains("STAFF_SECRET_KEY"), "{refused}");
}
