//! Passwords, one way for every service that keeps them (the member service's buyers,
//! the orchestrator's staff): the policy a new one must meet, and Argon2id hashing off
//! the async threads, a bounded number at a time (each hash holds its memory cost while
//! it runs).

use std::sync::Arc;

use argon2::{
    password_hash::SaltString, Algorithm, Argon2, Params, PasswordHash, PasswordHasher,
    PasswordVerifier, Version,
};
use rand::RngCore;
use tokio::sync::Semaphore;

use crate::config::{self, ConfigError};

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
    /// The stable code of the refusal (the same in every service's answers).
    pub fn code(self) -> &'static str {
        match self {
            Rule::TooShort => "PASSWORD_TOO_SHORT",
            Rule::TooLong => "PASSWORD_TOO_LONG",
            Rule::ContainsEmail => "PASSWORD_CONTAINS_EMAIL",
            Rule::TooCommon => "PASSWORD_TOO_COMMON",
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

/// Checks a new password: 12 to 128 characters, not a common password, and (when the
/// email's `local_part` is given and has 4 characters or more) not containing it.
pub fn check(password: &str, local_part: Option<&str>) -> Result<(), Rule> {
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
    if let Some(local) = local_part {
        if local.chars().count() >= MIN_LOCAL_PART && lower.contains(&local.to_lowercase()) {
            return Err(Rule::ContainsEmail);
        }
    }
    Ok(())
}

/// Argon2id's cost parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Argon2Params {
    pub memory_kib: u32,
    pub iterations: u32,
    pub parallelism: u32,
}

impl Argon2Params {
    /// OWASP's minimum for Argon2id (Password Storage Cheat Sheet): 19 MiB, 2 passes,
    /// 1 lane.
    pub const OWASP: Self = Self {
        memory_kib: 19_456,
        iterations: 2,
        parallelism: 1,
    };

    /// The cheapest parameters argon2 accepts, for tests only.
    pub const TEST_ONLY_CHEAP: Self = Self {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    };

    /// `ARGON2_MEMORY_KIB`, `ARGON2_ITERATIONS`, `ARGON2_PARALLELISM`, each defaulting to
    /// [`Self::OWASP`]'s.
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            memory_kib: config::parse("ARGON2_MEMORY_KIB", Self::OWASP.memory_kib)?,
            iterations: config::parse("ARGON2_ITERATIONS", Self::OWASP.iterations)?,
            parallelism: config::parse("ARGON2_PARALLELISM", Self::OWASP.parallelism)?,
        })
    }
}

/// Hashing failed or a stored hash does not parse; should be impossible.
#[derive(Debug, Clone, thiserror::Error)]
#[error("password hashing: {0}")]
pub struct HashError(pub String);

/// Hashes and verifies passwords with Argon2id, on the blocking pool, at most
/// `max_concurrent` at a time.
#[derive(Clone)]
pub struct Passwords {
    argon: Argon2<'static>,
    permits: Arc<Semaphore>,
    /// A hash of a random password made with the same parameters: an unknown email is
    /// verified against it, so it costs what a known one does.
    dummy: Arc<str>,
    /// The histogram each hash's duration is recorded in (`<service>_argon2_seconds`).
    metric: &'static str,
}

impl Passwords {
    pub async fn new(
        params: Argon2Params,
        max_concurrent: usize,
        metric: &'static str,
    ) -> Result<Self, HashError> {
        let params = Params::new(
            params.memory_kib,
            params.iterations,
            params.parallelism,
            None,
        )
        .map_err(|e| HashError(e.to_string()))?;
        let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
        let mut this = Self {
            argon,
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
            dummy: Arc::from(""),
            metric,
        };
        let dummy = this.hash(random_hex(32)).await?;
        this.dummy = Arc::from(dummy);
        Ok(this)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Argon2<'static>) -> T + Send + 'static,
    ) -> Result<T, HashError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| HashError("hashing semaphore closed".into()))?;
        let argon = self.argon.clone();
        let started = std::time::Instant::now();
        let out = tokio::task::spawn_blocking(move || work(&argon))
            .await
            .map_err(|e| HashError(format!("hashing task failed: {e}")))?;
        metrics::histogram!(self.metric).record(started.elapsed().as_secs_f64());
        Ok(out)
    }

    /// A PHC string (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`) with a fresh salt.
    pub async fn hash(&self, password: String) -> Result<String, HashError> {
        let mut salt = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        self.blocking(move |argon| {
            let salt = SaltString::encode_b64(&salt).map_err(|e| HashError(e.to_string()))?;
            argon
                .hash_password(password.as_bytes(), &salt)
                .map(|h| h.to_string())
                .map_err(|e| HashError(e.to_string()))
        })
        .await?
    }

    /// Whether `password` matches `phc` (with the parameters stored in it); `None`
    /// verifies against the dummy hash and is always false, at the same cost.
    pub async fn verify(&self, password: String, phc: Option<String>) -> Result<bool, HashError> {
        let known = phc.is_some();
        let phc = phc.unwrap_or_else(|| self.dummy.to_string());
        let matched = self
            .blocking(move |argon| {
                let parsed = PasswordHash::new(&phc).map_err(|e| HashError(e.to_string()))?;
                match argon.verify_password(password.as_bytes(), &parsed) {
                    Ok(()) => Ok(true),
                    Err(argon2::password_hash::Error::Password) => Ok(false),
                    Err(e) => Err(HashError(e.to_string())),
                }
            })
            .await??;
        Ok(known && matched)
    }
}

/// `n` random bytes as lower-case hex.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_has_its_code() {
        let local = Some("marguerite");
        assert_eq!(check("short", local), Err(Rule::TooShort));
        assert_eq!(check(&"x".repeat(129), local), Err(Rule::TooLong));
        assert_eq!(check(&"x".repeat(128), local), Ok(()));
        assert_eq!(check("Password1234", local), Err(Rule::TooCommon));
        assert_eq!(check("my-MARGUERITE-pass", local), Err(Rule::ContainsEmail));
        assert_eq!(check("plum-orbit-canyon-47", local), Ok(()));
        // A short local part is no rule.
        assert_eq!(check("bob-orbit-canyon-47", Some("bob")), Ok(()));
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
        let pw = Passwords::new(Argon2Params::TEST_ONLY_CHEAP, 2, "test_argon2_seconds")
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
