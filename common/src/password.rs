//! Passwords, one way for every service that keeps them (the member service's buyers,
//! the orchestrator's staff): the policy a new one must meet, and Argon2id hashing off
//! the async threads, a bounded number at a time, in working memory kept from one hash
//! to the next.

use std::sync::{Arc, Mutex};

use argon2::{
    password_hash::{Output, ParamsString, SaltString},
    Algorithm, Argon2, Block, Params, PasswordHash, Version,
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

/// The OpenAPI schema of a password field, written from the rules above so a client's
/// validation can never drift from the service's: 12 to 128 characters and none of the
/// common passwords in any case (the name-part rule needs the email, so only the
/// service checks it).
pub fn schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "12 to 128 characters, none of the common passwords (any case); a new \
             password also may not hold the email's name part.",
        ))
        .examples(["plum-orbit-canyon-47"])
        .min_length(Some(MIN_LEN))
        .max_length(Some(MAX_LEN))
        .pattern(Some(not_common_pattern()))
        .build()
}

/// `^(?!(?:one|two|...)$)`, each letter as `[xX]`, so the pattern refuses the common
/// passwords in any case without a case-insensitive flag (JSON Schema has none).
fn not_common_pattern() -> String {
    let alternatives: Vec<String> = COMMON
        .iter()
        .map(|common| {
            common
                .chars()
                .map(|c| match c {
                    'a'..='z' => format!("[{c}{}]", c.to_ascii_uppercase()),
                    c if "\\^$.|?*+()[]{}".contains(c) => format!("\\{c}"),
                    c => c.to_string(),
                })
                .collect()
        })
        .collect();
    format!("^(?!(?:{})$)", alternatives.join("|"))
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

/// Argon2's working memory (its cost, 19 MiB by default), kept between hashes: at most
/// one buffer per hash running at once. Allocated afresh for each hash, on whichever
/// blocking thread ran it, the buffers stayed in each thread's allocator arena once freed
/// (glibc raises its mmap threshold after the first such free), so a service's memory
/// grew with the threads the blocking pool had used, not with the hashes in flight.
#[derive(Default)]
struct Scratch(Mutex<Vec<Vec<Block>>>);

impl Scratch {
    /// `out` filled with `argon`'s hash of `password` and `salt`, computed in a buffer
    /// taken from the pool and given back after.
    fn hash_into(
        &self,
        argon: &Argon2<'_>,
        password: &[u8],
        salt: &[u8],
        out: &mut [u8],
    ) -> Result<(), HashError> {
        let taken = self.0.lock().map(|mut pool| pool.pop()).unwrap_or_default();
        let mut blocks = taken.unwrap_or_default();
        // Argon2 writes every block before it reads it, so a reused buffer needs no
        // clearing.
        blocks.resize(argon.params().block_count(), Block::default());
        let hashed = argon.hash_password_into_with_memory(password, salt, out, &mut blocks);
        if let Ok(mut pool) = self.0.lock() {
            pool.push(blocks);
        }
        hashed.map_err(|e| HashError(e.to_string()))
    }
}

fn phc_error(e: impl std::fmt::Display) -> HashError {
    HashError(e.to_string())
}

/// Hashes and verifies passwords with Argon2id, on the blocking pool, at most
/// `max_concurrent` at a time.
#[derive(Clone)]
pub struct Passwords {
    argon: Argon2<'static>,
    scratch: Arc<Scratch>,
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
            scratch: Arc::default(),
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
        work: impl FnOnce(&Argon2<'static>, &Scratch) -> T + Send + 'static,
    ) -> Result<T, HashError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| HashError("hashing semaphore closed".into()))?;
        let argon = self.argon.clone();
        let scratch = self.scratch.clone();
        let started = std::time::Instant::now();
        let out = tokio::task::spawn_blocking(move || work(&argon, &scratch))
            .await
            .map_err(|e| HashError(format!("hashing task failed: {e}")))?;
        metrics::histogram!(self.metric).record(started.elapsed().as_secs_f64());
        Ok(out)
    }

    /// A PHC string (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`) with a fresh salt.
    pub async fn hash(&self, password: String) -> Result<String, HashError> {
        let mut salt = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        self.blocking(move |argon, scratch| {
            let encoded = SaltString::encode_b64(&salt).map_err(phc_error)?;
            let mut out = [0u8; Params::DEFAULT_OUTPUT_LEN];
            scratch.hash_into(argon, password.as_bytes(), &salt, &mut out)?;
            let phc = PasswordHash {
                algorithm: Algorithm::Argon2id.ident(),
                version: Some(Version::V0x13.into()),
                params: ParamsString::try_from(argon.params()).map_err(phc_error)?,
                salt: Some(encoded.as_salt()),
                hash: Some(Output::new(&out).map_err(phc_error)?),
            };
            Ok(phc.to_string())
        })
        .await?
    }

    /// Whether `password` matches `phc` (with the parameters stored in it); `None`
    /// verifies against the dummy hash and is always false, at the same cost.
    pub async fn verify(&self, password: String, phc: Option<String>) -> Result<bool, HashError> {
        let known = phc.is_some();
        let phc = phc.unwrap_or_else(|| self.dummy.to_string());
        let matched = self
            .blocking(move |_, scratch| verify(scratch, password.as_bytes(), &phc))
            .await??;
        Ok(known && matched)
    }
}

/// Whether `password` hashes to `phc` under the algorithm, version and parameters
/// stored in it (a hash made under other settings still verifies); the outputs are
/// compared in constant time.
fn verify(scratch: &Scratch, password: &[u8], phc: &str) -> Result<bool, HashError> {
    let parsed = PasswordHash::new(phc).map_err(phc_error)?;
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return Err(HashError("a stored hash without its salt or output".into()));
    };
    let algorithm = Algorithm::try_from(parsed.algorithm).map_err(phc_error)?;
    let version = parsed
        .version
        .map(Version::try_from)
        .transpose()
        .map_err(phc_error)?
        .unwrap_or_default();
    let params = Params::try_from(&parsed).map_err(phc_error)?;
    let argon = Argon2::new(algorithm, version, params);
    let mut salt_buf = [0u8; 64];
    let salt = salt.decode_b64(&mut salt_buf).map_err(phc_error)?;
    let mut out = vec![0u8; expected.len()];
    scratch.hash_into(&argon, password, salt, &mut out)?;
    Ok(Output::new(&out).map_err(phc_error)? == expected)
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
    fn the_schema_pattern_names_every_common_password_in_any_case() {
        let pattern = not_common_pattern();
        let alternatives = pattern
            .strip_prefix("^(?!(?:")
            .and_then(|p| p.strip_suffix(")$)"))
            .expect("a negative lookahead over the whole value");
        let alternatives: Vec<&str> = alternatives.split('|').collect();
        assert_eq!(alternatives.len(), COMMON.len());
        for (alternative, common) in alternatives.into_iter().zip(COMMON) {
            // Each letter stands as a class of its two cases, all else as it is.
            let mut back = alternative.to_owned();
            for c in 'a'..='z' {
                back = back.replace(&format!("[{c}{}]", c.to_ascii_uppercase()), &c.to_string());
            }
            assert_eq!(&back, common, "{alternative}");
            assert!(!back.contains('['), "{alternative}");
        }
    }

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

    /// Hashes made by the argon2 crate's own hasher (as every stored hash was made
    /// before the working memory was kept) verify, under other parameters too, and its
    /// verifier accepts the hashes made here: the stored format is the same.
    #[tokio::test]
    async fn hashes_are_those_of_the_argon2_crate_both_ways() {
        use argon2::{PasswordHasher, PasswordVerifier};
        let pw = Passwords::new(Argon2Params::TEST_ONLY_CHEAP, 2, "test_argon2_seconds")
            .await
            .unwrap();
        let salt = SaltString::encode_b64(b"0123456789abcdef").unwrap();
        for (m, t, p) in [(64, 1, 1), (256, 2, 2), (1024, 3, 1)] {
            let theirs = Argon2::new(
                Algorithm::Argon2id,
                Version::V0x13,
                Params::new(m, t, p, None).unwrap(),
            )
            .hash_password(b"plum-orbit-canyon-47", &salt)
            .unwrap()
            .to_string();
            assert!(pw
                .verify("plum-orbit-canyon-47".into(), Some(theirs.clone()))
                .await
                .unwrap());
            assert!(!pw
                .verify("plum-orbit-canyon-48".into(), Some(theirs))
                .await
                .unwrap());
        }
        let ours = pw.hash("plum-orbit-canyon-47".into()).await.unwrap();
        let parsed = PasswordHash::new(&ours).unwrap();
        assert!(Argon2::default()
            .verify_password(b"plum-orbit-canyon-47", &parsed)
            .is_ok());
        assert_eq!(
            Argon2::new(
                Algorithm::Argon2id,
                Version::V0x13,
                Params::new(64, 1, 1, None).unwrap()
            )
            .hash_password(b"plum-orbit-canyon-47", parsed.salt.unwrap())
            .unwrap()
            .to_string(),
            ours,
            "the same string the crate makes"
        );
        assert_eq!(pw.scratch.0.lock().unwrap().len(), 1, "one buffer kept");
    }

    /// However many hashes are asked for at once, and whichever blocking threads run
    /// them, no more working buffers are ever made than hashes may run at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn working_memory_is_bounded_by_the_hashes_running_at_once() {
        let pw = Passwords::new(Argon2Params::TEST_ONLY_CHEAP, 2, "test_argon2_seconds")
            .await
            .unwrap();
        let many = (0..32).map(|i| {
            let pw = pw.clone();
            tokio::spawn(async move { pw.hash(format!("password-{i}")).await.unwrap() })
        });
        for h in futures::future::join_all(many).await {
            h.unwrap();
        }
        let kept = pw.scratch.0.lock().unwrap().len();
        assert!((1..=2).contains(&kept), "{kept} buffers kept");
    }
}
