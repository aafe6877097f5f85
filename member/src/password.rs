//! Passwords: the policy a new one must meet, and Argon2id hashing off the async
//! threads, a bounded number at a time (each hash holds its memory cost while it runs).

use std::sync::Arc;

use argon2::{
    password_hash::SaltString, Algorithm, Argon2, Params, PasswordHash, PasswordHasher,
    PasswordVerifier, Version,
};
use rand::RngCore;
use tokio::sync::Semaphore;

use crate::{
    api::codes,
    config::Argon2Params,
    email::Email,
    error::{Error, Result},
};

pub const MIN_LEN: usize = 12;
pub const MAX_LEN: usize = 128;
/// A local part shorter than this is too common a string to forbid in passwords.
pub const MIN_LOCAL_PART: usize = 4;

/// Passwords long enough to pass the length rule that are still among the first any
/// guesser tries. Compared lower-cased.
const COMMON: &[&str] = &[
    "000000000000",
    "111111111111",
    "123123123123",
    "123456789012",
    "1234567890123",
    "12345678901234",
    "123456123456",
    "1q2w3e4r5t6y",
    "1qaz2wsx3edc",
    "abc123456789",
    "abcdefghijkl",
    "administrator",
    "asdfghjkl123",
    "baseball1234",
    "changeme1234",
    "correcthorsebatterystaple",
    "correct horse battery staple",
    "football1234",
    "iloveyou1234",
    "letmein12345",
    "monkey123456",
    "p@ssw0rd1234",
    "passw0rd1234",
    "password1234",
    "password123!",
    "password12345",
    "passwordpassword",
    "princess1234",
    "qwerty123456",
    "qwertyuiop12",
    "qwertyuiop123",
    "qwertyuiopasdf",
    "sunshine1234",
    "trustno1trustno1",
    "welcome12345",
    "zaq12wsxcde3",
];

/// A password policy rule a new password broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    TooShort,
    TooLong,
    ContainsEmail,
    TooCommon,
}

impl Rule {
    pub fn code(self) -> &'static str {
        match self {
            Rule::TooShort => codes::PASSWORD_TOO_SHORT,
            Rule::TooLong => codes::PASSWORD_TOO_LONG,
            Rule::ContainsEmail => codes::PASSWORD_CONTAINS_EMAIL,
            Rule::TooCommon => codes::PASSWORD_TOO_COMMON,
        }
    }

    pub fn message(self) -> String {
        match self {
            Rule::TooShort => format!("password must have at least {MIN_LEN} characters"),
            Rule::TooLong => format!("password must have at most {MAX_LEN} characters"),
            Rule::ContainsEmail => "password must not contain the email's name part".into(),
            Rule::TooCommon => "password is too common; choose another".into(),
        }
    }
}

/// Checks a new password: 12 to 128 characters, not a common password, and (when
/// `email` is given and its local part has 4 characters or more) not containing it.
pub fn check(password: &str, email: Option<&Email>) -> Result<(), Rule> {
    let len = password.chars().count();
    if len < MIN_LEN {
        return Err(Rule::TooShort);
    }
    if len > MAX_LEN {
        return Err(Rule::TooLong);
    }
    let lower = password.to_lowercase();
    if COMMON.contains(&lower.as_str()) {
        return Err(Rule::TooCommon);
    }
    if let Some(email) = email {
        let local = email.local_part();
        if local.chars().count() >= MIN_LOCAL_PART && lower.contains(local) {
            return Err(Rule::ContainsEmail);
        }
    }
    Ok(())
}

/// Hashes and verifies passwords with Argon2id, on the blocking pool, at most
/// `max_concurrent` at a time.
#[derive(Clone)]
pub struct Passwords {
    argon: Argon2<'static>,
    permits: Arc<Semaphore>,
    /// A hash of a random password made with the same parameters: an unknown email is
    /// verified against it, so it costs what a known one does.
    dummy: Arc<str>,
}

impl Passwords {
    pub async fn new(params: Argon2Params, max_concurrent: usize) -> Result<Self> {
        let params = Params::new(
            params.memory_kib,
            params.iterations,
            params.parallelism,
            None,
        )
        .map_err(|e| Error::Hashing(e.to_string()))?;
        let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
        let mut this = Self {
            argon,
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
            dummy: Arc::from(""),
        };
        let mut random = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut random);
        let dummy = this.hash(hex(&random)).await?;
        this.dummy = Arc::from(dummy);
        Ok(this)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Argon2<'static>) -> T + Send + 'static,
    ) -> Result<T> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::Hashing("hashing semaphore closed".into()))?;
        let argon = self.argon.clone();
        let started = std::time::Instant::now();
        let out = tokio::task::spawn_blocking(move || work(&argon))
            .await
            .map_err(|e| Error::Hashing(format!("hashing task failed: {e}")))?;
        metrics::histogram!("member_argon2_seconds").record(started.elapsed().as_secs_f64());
        Ok(out)
    }

    /// A PHC string (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`) with a fresh salt.
    pub async fn hash(&self, password: String) -> Result<String> {
        let mut salt = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        self.blocking(move |argon| {
            let salt = SaltString::encode_b64(&salt).map_err(|e| Error::Hashing(e.to_string()))?;
            argon
                .hash_password(password.as_bytes(), &salt)
                .map(|h| h.to_string())
                .map_err(|e| Error::Hashing(e.to_string()))
        })
        .await?
    }

    /// Whether `password` matches `phc` (with the parameters stored in it); `None`
    /// verifies against the dummy hash and is always false, at the same cost.
    pub async fn verify(&self, password: String, phc: Option<String>) -> Result<bool> {
        let known = phc.is_some();
        let phc = phc.unwrap_or_else(|| self.dummy.to_string());
        let matched = self
            .blocking(move |argon| {
                let parsed = PasswordHash::new(&phc).map_err(|e| Error::Hashing(e.to_string()))?;
                match argon.verify_password(password.as_bytes(), &parsed) {
                    Ok(()) => Ok(true),
                    Err(argon2::password_hash::Error::Password) => Ok(false),
                    Err(e) => Err(Error::Hashing(e.to_string())),
                }
            })
            .await??;
        Ok(known && matched)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn email(s: &str) -> Email {
        Email::parse(s).unwrap()
    }

    #[test]
    fn each_rule_has_its_code() {
        let e = email("marguerite@example.com");
        assert_eq!(check("short", Some(&e)), Err(Rule::TooShort));
        assert_eq!(check(&"x".repeat(129), Some(&e)), Err(Rule::TooLong));
        assert_eq!(check(&"x".repeat(128), Some(&e)), Ok(()));
        assert_eq!(check("Password1234", Some(&e)), Err(Rule::TooCommon));
        assert_eq!(
            check("my-MARGUERITE-pass", Some(&e)),
            Err(Rule::ContainsEmail)
        );
        assert_eq!(check("plum-orbit-canyon-47", Some(&e)), Ok(()));
        // A short local part is no rule.
        assert_eq!(
            check("bob-orbit-canyon-47", Some(&email("bob@x.io"))),
            Ok(())
        );
        // Length counts characters, not bytes.
        assert_eq!(check("ééééééééééé", None), Err(Rule::TooShort));
        for common in COMMON {
            assert!(
                common.chars().count() >= MIN_LEN,
                "{common} is caught by length"
            );
        }
    }

    #[tokio::test]
    async fn hashes_verify_and_the_dummy_never_matches() {
        let pw = Passwords::new(Argon2Params::TEST_ONLY_CHEAP, 2)
            .await
            .unwrap();
        let phc = pw.hash("plum-orbit-canyon-47".into()).await.unwrap();
        assert!(phc.starts_with("$argon2id$v=19$m=64,t=1,p=1$"));
        assert!(pw
            .verify("plum-orbit-canyon-47".into(), Some(phc.clone()))
            .await
            .unwrap());
        assert!(!pw.verify("wrong".into(), Some(phc)).await.unwrap());
        assert!(!pw.verify("anything".into(), None).await.unwrap());
    }
}
