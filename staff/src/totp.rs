//! The second factor: RFC 6238 TOTP (HMAC-SHA-1, 6 digits, 30-second steps, one step of
//! clock drift either way) through `totp-rs`, and single-use recovery codes.

use rand::{Rng, RngCore};
use sha2::{Digest, Sha256};
use totp_rs::{Algorithm, Secret, TOTP};

/// Seconds per step.
pub const STEP: u64 = 30;
const DIGITS: usize = 6;
/// The issuer authenticator apps show.
pub const ISSUER: &str = "paysaga";
/// Recovery codes a new account gets.
pub const RECOVERY_CODES: usize = 10;

/// A fresh 160-bit secret (RFC 4226's recommended length).
pub fn new_secret() -> Vec<u8> {
    let mut s = vec![0u8; 20];
    rand::thread_rng().fill_bytes(&mut s);
    s
}

fn totp(secret: &[u8], email: &str) -> Option<TOTP> {
    TOTP::new(
        Algorithm::SHA1,
        DIGITS,
        0,
        STEP,
        secret.to_vec(),
        Some(ISSUER.to_owned()),
        email.to_owned(),
    )
    .ok()
}

/// The secret as base32 (what an authenticator app takes typed in).
pub fn base32(secret: &[u8]) -> String {
    Secret::Raw(secret.to_vec()).to_encoded().to_string()
}

/// The secret from base32.
pub fn from_base32(s: &str) -> Option<Vec<u8>> {
    Secret::Encoded(s.to_owned()).to_bytes().ok()
}

/// The `otpauth://totp/...` URL an authenticator app reads (as a QR code or pasted).
pub fn otpauth_url(secret: &[u8], email: &str) -> Option<String> {
    totp(secret, email).map(|t| t.get_url())
}

/// The code for unix time `at`.
pub fn code_at(secret: &[u8], at: u64) -> Option<String> {
    totp(secret, "x@x").map(|t| t.generate(at))
}

/// The step (`unix time / 30`) whose code `code` is, looking at the step of `now` and
/// one either side; `None` if it is none of them. The caller accepts a step only once
/// (a step no later than the last one used is a replayed code).
pub fn matching_step(secret: &[u8], code: &str, now: u64) -> Option<i64> {
    let code = code.trim();
    if code.len() != DIGITS || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let t = totp(secret, "x@x")?;
    let current = now / STEP;
    [current, current.saturating_sub(1), current + 1]
        .into_iter()
        .find(|step| t.check(code, step * STEP))
        .map(|step| step as i64)
}

/// Whether `code` looks like a TOTP code (six digits) rather than a recovery code.
pub fn is_totp_code(code: &str) -> bool {
    let code = code.trim();
    code.len() == DIGITS && code.bytes().all(|b| b.is_ascii_digit())
}

/// The letters recovery codes are made of: no 0/O, 1/I/L confusion.
const RECOVERY_ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";

/// Fresh recovery codes, `xxxxx-xxxxx` (about 49 bits each).
pub fn new_recovery_codes() -> Vec<String> {
    let mut rng = rand::thread_rng();
    (0..RECOVERY_CODES)
        .map(|_| {
            let mut half = || -> String {
                (0..5)
                    .map(|_| RECOVERY_ALPHABET[rng.gen_range(0..RECOVERY_ALPHABET.len())] as char)
                    .collect()
            };
            let a = half();
            let b = half();
            format!("{a}-{b}")
        })
        .collect()
}

/// What is stored of a recovery code: the SHA-256 of its letters, lower-cased, without
/// the dash or spaces (random codes of this length need no slow hash).
pub fn recovery_hash(code: &str) -> Vec<u8> {
    let normal: String = code
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    Sha256::digest(normal.as_bytes()).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6238's SHA-1 test secret and vectors (its 8-digit values, last 6 digits).
    #[test]
    fn the_rfc_6238_vectors_match() {
        let secret = b"12345678901234567890";
        for (t, code) in [
            (59u64, "287082"),
            (1_111_111_109, "081804"),
            (1_234_567_890, "005924"),
            (2_000_000_000, "279037"),
        ] {
            assert_eq!(code_at(secret, t).as_deref(), Some(code), "t={t}");
            assert_eq!(matching_step(secret, code, t), Some((t / STEP) as i64));
        }
    }

    #[test]
    fn a_code_is_good_for_its_step_and_one_either_side_only() {
        let secret = new_secret();
        let now = 1_800_000_000;
        let code = code_at(&secret, now).unwrap();
        assert_eq!(
            matching_step(&secret, &code, now + STEP),
            Some((now / STEP) as i64)
        );
        assert_eq!(
            matching_step(&secret, &code, now - STEP),
            Some((now / STEP) as i64)
        );
        assert_eq!(matching_step(&secret, &code, now + 3 * STEP), None);
        assert_eq!(matching_step(&secret, "12345", now), None);
        assert_eq!(matching_step(&secret, "abcdef", now), None);
    }

    #[test]
    fn secrets_round_trip_through_base32_and_the_url_names_the_person() {
        let secret = new_secret();
        assert_eq!(from_base32(&base32(&secret)), Some(secret.clone()));
        let url = otpauth_url(&secret, "alice@example.com").unwrap();
        assert!(
            url.starts_with("otpauth://totp/paysaga:alice%40example.com?"),
            "{url}"
        );
        assert!(
            url.contains(&format!("secret={}", base32(&secret))),
            "{url}"
        );
    }

    #[test]
    fn recovery_codes_are_distinct_and_hash_the_same_however_typed() {
        let codes = new_recovery_codes();
        assert_eq!(codes.len(), RECOVERY_CODES);
        let unique: std::collections::BTreeSet<_> = codes.iter().collect();
        assert_eq!(unique.len(), RECOVERY_CODES);
        let c = &codes[0];
        assert_eq!(
            recovery_hash(c),
            recovery_hash(&c.to_uppercase().replace('-', " "))
        );
        assert!(!is_totp_code(c));
        assert!(is_totp_code("012345"));
    }
}
