//! Limits that hold back the sender, counted in PostgreSQL so every instance of the
//! service sees the same numbers: failed sign-ins per (email, address) pair, per address
//! and per email, and sign-ups per address and in total. Every check runs before any
//! password hashing, so a refused attempt costs a query or two and no Argon2 work.
//!
//! A guesser is refused the email it guesses at from its own address (the pair), and
//! every email once its address has failed often (the address). An email guessed at
//! from many addresses (the email scope) is refused only to the addresses that have
//! failed for it, so its member, signing in from an address that has not been
//! guessing, still gets in.

use std::{
    fmt,
    net::{IpAddr, Ipv6Addr},
    time::Duration,
};

use sha2::{Digest, Sha256};
use sqlx::PgPool;

use crate::{
    config::{SignUpLimits, Throttle},
    error::{Error, Result},
};

/// How a client address is counted: an IPv4 address alone; an IPv6 address by its /64
/// network, the least a subscriber is usually given and can move around in freely.
fn address_key(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let network = Ipv6Addr::from(u128::from(v6) & !(u64::MAX as u128));
            format!("{network}/64")
        }
    }
}

fn hash(parts: &[&[u8]]) -> Vec<u8> {
    let mut h = Sha256::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            // No normalised email and no address holds a NUL: the parts cannot run
            // into one another.
            h.update([0]);
        }
        h.update(part);
    }
    h.finalize().to_vec()
}

/// The scopes a failed sign-in is counted in (`sign_in_failures.scope`, CHECK
/// `sign_in_failures_scope_known`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignInScope {
    /// One email from one address.
    Pair,
    /// One address, any email.
    Address,
    /// One email, any address.
    Email,
}

impl SignInScope {
    fn as_str(self) -> &'static str {
        match self {
            SignInScope::Pair => "PAIR",
            SignInScope::Address => "ADDRESS",
            SignInScope::Email => "EMAIL",
        }
    }

    fn label(self) -> &'static str {
        match self {
            SignInScope::Pair => "pair",
            SignInScope::Address => "address",
            SignInScope::Email => "email",
        }
    }
}

/// Who a sign-in attempt counts against; stored only as hashes. Without a known
/// address (a router called without connection info) the pair is the email with no
/// address, and no address is counted.
pub(crate) struct Subjects {
    pair: Vec<u8>,
    email: Vec<u8>,
    address: Option<Vec<u8>>,
}

impl Subjects {
    pub fn new(email: &str, address: Option<IpAddr>) -> Self {
        let address = address.map(address_key);
        Self {
            pair: hash(&[
                email.as_bytes(),
                address.as_deref().unwrap_or_default().as_bytes(),
            ]),
            email: hash(&[email.as_bytes()]),
            address: address.map(|a| hash(&[a.as_bytes()])),
        }
    }

    /// Each scope this attempt is counted in, with its subject.
    fn scoped(&self) -> impl Iterator<Item = (SignInScope, &[u8])> {
        [
            (SignInScope::Pair, Some(&self.pair)),
            (SignInScope::Email, Some(&self.email)),
            (SignInScope::Address, self.address.as_ref()),
        ]
        .into_iter()
        .filter_map(|(scope, subject)| subject.map(|s| (scope, s.as_slice())))
    }
}

/// The failures each scope holds in its current window, and the seconds left of it
/// (0 and 0 for a scope with none).
#[derive(Debug, Default, Clone, Copy, sqlx::FromRow)]
struct Live {
    pair_failures: i32,
    pair_left: f64,
    address_failures: i32,
    address_left: f64,
    email_failures: i32,
    email_left: f64,
}

impl Live {
    /// The scope that refuses an attempt, and the seconds until it would not; the
    /// longest wait when several refuse.
    fn refusal(&self, limits: &Throttle) -> Option<(SignInScope, f64)> {
        let reached = |failures: i32, limit: u32| i64::from(failures) >= i64::from(limit);
        [
            reached(self.pair_failures, limits.per_pair)
                .then_some((SignInScope::Pair, self.pair_left)),
            reached(self.address_failures, limits.per_address)
                .then_some((SignInScope::Address, self.address_left)),
            // Past the email's limit only the addresses that failed for it are refused,
            // until the email's window or the pair's ends, whichever comes first.
            (reached(self.email_failures, limits.per_email) && self.pair_failures > 0)
                .then_some((SignInScope::Email, self.email_left.min(self.pair_left))),
        ]
        .into_iter()
        .flatten()
        .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// Refuses with `TOO_MANY_ATTEMPTS` (and the seconds until it would not) when a scope
/// of the attempt reached its limit within the window.
pub(crate) async fn check(pool: &PgPool, limits: &Throttle, who: &Subjects) -> Result<()> {
    let live: Live = sqlx::query_as(
        r#"SELECT COALESCE(MAX(failures) FILTER (WHERE scope = 'PAIR'), 0) AS pair_failures,
                  COALESCE(MAX(left_secs) FILTER (WHERE scope = 'PAIR'), 0::float8) AS pair_left,
                  COALESCE(MAX(failures) FILTER (WHERE scope = 'ADDRESS'), 0) AS address_failures,
                  COALESCE(MAX(left_secs) FILTER (WHERE scope = 'ADDRESS'), 0::float8) AS address_left,
                  COALESCE(MAX(failures) FILTER (WHERE scope = 'EMAIL'), 0) AS email_failures,
                  COALESCE(MAX(left_secs) FILTER (WHERE scope = 'EMAIL'), 0::float8) AS email_left
           FROM (
               SELECT scope, failures,
                      EXTRACT(EPOCH FROM (window_start + make_interval(secs => $4) - now()))::float8
                          AS left_secs
               FROM sign_in_failures
               WHERE (scope = 'PAIR' AND subject = $1)
                  OR (scope = 'ADDRESS' AND subject = $2)
                  OR (scope = 'EMAIL' AND subject = $3)
           ) AS counted
           WHERE left_secs > 0"#,
    )
    .bind(&who.pair)
    .bind(who.address.as_deref().unwrap_or_default())
    .bind(&who.email)
    .bind(limits.window.as_secs_f64())
    .fetch_one(pool)
    .await?;
    match live.refusal(limits) {
        Some((scope, left)) => {
            metrics::counter!("member_sign_in_throttled_total", "scope" => scope.label())
                .increment(1);
            Err(Error::TooManyAttempts {
                retry_after_secs: (left.ceil() as u64).max(1),
            })
        }
        None => Ok(()),
    }
}

/// Counts a failed attempt in each of its scopes: a subject whose window has passed
/// starts a new one.
pub(crate) async fn record_failure(pool: &PgPool, limits: &Throttle, who: &Subjects) -> Result<()> {
    let (scopes, subjects): (Vec<&str>, Vec<&[u8]>) = who
        .scoped()
        .map(|(scope, subject)| (scope.as_str(), subject))
        .unzip();
    sqlx::query(
        r#"INSERT INTO sign_in_failures AS f (scope, subject, failures, window_start)
           SELECT s, subj, 1, now()
           FROM UNNEST($1::text[], $2::bytea[]) AS t(s, subj)
           ON CONFLICT ON CONSTRAINT sign_in_failures_pkey DO UPDATE SET
               failures = CASE WHEN f.window_start + make_interval(secs => $3) <= now()
                               THEN 1 ELSE f.failures + 1 END,
               window_start = CASE WHEN f.window_start + make_interval(secs => $3) <= now()
                                   THEN now() ELSE f.window_start END"#,
    )
    .bind(scopes)
    .bind(subjects)
    .bind(limits.window.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}

/// A successful sign-in clears its pair's count: the member at that address is not
/// guessing. The address's and the email's counts stay: one good password does not
/// excuse the guesses of others behind the same address, or at the same email.
pub(crate) async fn clear_pair(pool: &PgPool, who: &Subjects) -> Result<()> {
    sqlx::query(r#"DELETE FROM sign_in_failures WHERE scope = 'PAIR' AND subject = $1"#)
        .bind(&who.pair)
        .execute(pool)
        .await?;
    Ok(())
}

/// What a sign-up is counted in (`sign_up_attempts.scope`, CHECK
/// `sign_up_attempts_scope_known`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignUpScope {
    /// Sign-ups from one address.
    Address,
    /// Every sign-up, on every instance.
    Total,
}

impl SignUpScope {
    fn as_str(self) -> &'static str {
        match self {
            SignUpScope::Address => "ADDRESS",
            SignUpScope::Total => "TOTAL",
        }
    }

    fn label(self) -> &'static str {
        match self {
            SignUpScope::Address => "address",
            SignUpScope::Total => "total",
        }
    }
}

impl fmt::Display for SignUpScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SignUpScope::Address => "from this address",
            SignUpScope::Total => "at this moment",
        })
    }
}

/// Takes one sign-up from the address's window (when the address is known), then one
/// from the total's; refuses with `TOO_MANY_SIGN_UPS` when a window is full. An address
/// refused takes nothing from the total, so one sender's flood cannot use up everyone's
/// sign-ups.
pub(crate) async fn take_sign_up(
    pool: &PgPool,
    limits: &SignUpLimits,
    address: Option<IpAddr>,
) -> Result<()> {
    if let Some(ip) = address {
        let subject = hash(&[address_key(ip).as_bytes()]);
        take(
            pool,
            SignUpScope::Address,
            &subject,
            limits.per_address,
            limits.address_window,
        )
        .await?;
    }
    take(
        pool,
        SignUpScope::Total,
        &[],
        limits.total,
        limits.total_window,
    )
    .await
}

/// One attempt from `subject`'s window of `limit` in `window`: taken (a window that has
/// passed starts again at this attempt), or refused, counting nothing, when it is full.
async fn take(
    pool: &PgPool,
    scope: SignUpScope,
    subject: &[u8],
    limit: u32,
    window: Duration,
) -> Result<()> {
    let taken: Option<i32> = sqlx::query_scalar(
        r#"INSERT INTO sign_up_attempts AS a (scope, subject, attempts, window_start)
           VALUES ($1, $2, 1, now())
           ON CONFLICT ON CONSTRAINT sign_up_attempts_pkey DO UPDATE SET
               attempts = CASE WHEN a.window_start + make_interval(secs => $4) <= now()
                               THEN 1 ELSE a.attempts + 1 END,
               window_start = CASE WHEN a.window_start + make_interval(secs => $4) <= now()
                                   THEN now() ELSE a.window_start END
           WHERE a.window_start + make_interval(secs => $4) <= now() OR a.attempts < $3
           RETURNING attempts"#,
    )
    .bind(scope.as_str())
    .bind(subject)
    .bind(i64::from(limit))
    .bind(window.as_secs_f64())
    .fetch_optional(pool)
    .await?;
    if taken.is_some() {
        return Ok(());
    }
    let left: Option<f64> = sqlx::query_scalar(
        r#"SELECT EXTRACT(EPOCH FROM (window_start + make_interval(secs => $3) - now()))::float8
           FROM sign_up_attempts WHERE scope = $1 AND subject = $2"#,
    )
    .bind(scope.as_str())
    .bind(subject)
    .bind(window.as_secs_f64())
    .fetch_optional(pool)
    .await?;
    metrics::counter!("member_sign_ups_refused_total", "scope" => scope.label()).increment(1);
    Err(Error::TooManySignUps {
        scope,
        retry_after_secs: (left.unwrap_or_default().ceil() as u64).max(1),
    })
}

/// Deletes failure counts and sign-up counts whose window has passed (sign-up windows
/// measured by the longer of the two).
pub(crate) async fn purge(pool: &PgPool, limits: &Throttle, sign_up: &SignUpLimits) -> Result<u64> {
    let failures = sqlx::query(
        r#"DELETE FROM sign_in_failures WHERE window_start < now() - make_interval(secs => $1)"#,
    )
    .bind(limits.window.as_secs_f64())
    .execute(pool)
    .await?
    .rows_affected();
    let sign_ups = sqlx::query(
        r#"DELETE FROM sign_up_attempts WHERE window_start < now() - make_interval(secs => $1)"#,
    )
    .bind(
        sign_up
            .address_window
            .max(sign_up.total_window)
            .as_secs_f64(),
    )
    .execute(pool)
    .await?
    .rows_affected();
    Ok(failures + sign_ups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(pair: i32, address: i32, email: i32) -> Live {
        Live {
            pair_failures: pair,
            pair_left: 100.0,
            address_failures: address,
            address_left: 200.0,
            email_failures: email,
            email_left: 300.0,
        }
    }

    #[test]
    fn each_scope_refuses_at_its_limit_and_the_email_only_where_it_failed() {
        let limits = Throttle {
            per_pair: 5,
            per_address: 20,
            per_email: 50,
            window: Duration::from_secs(900),
        };
        let cases = [
            ((4, 19, 49), None),
            ((5, 0, 0), Some((SignInScope::Pair, 100.0))),
            ((0, 20, 0), Some((SignInScope::Address, 200.0))),
            // An email over its limit: an address that never failed for it gets in...
            ((0, 0, 500), None),
            // ... one that failed for it is held until the sooner window ends.
            ((1, 0, 50), Some((SignInScope::Email, 100.0))),
            // Several at once: the longest wait.
            ((5, 20, 50), Some((SignInScope::Address, 200.0))),
        ];
        for ((pair, address, email), want) in cases {
            assert_eq!(
                live(pair, address, email).refusal(&limits),
                want,
                "{pair} {address} {email}"
            );
        }
    }

    #[test]
    fn addresses_are_counted_by_ipv4_address_and_ipv6_network() {
        let key = |s: &str| address_key(s.parse().unwrap());
        assert_eq!(key("198.51.100.7"), "198.51.100.7");
        assert_eq!(key("::ffff:198.51.100.7"), "198.51.100.7");
        assert_eq!(key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(key("2001:db8:1:2:ffff:1:2:3"), key("2001:db8:1:2::9"));
        assert_ne!(key("2001:db8:1:3::1"), key("2001:db8:1:2::1"));
        // The address scope's subject is the hash of the address as written.
        assert_eq!(
            Subjects::new("a@example.com", Some("127.0.0.1".parse().unwrap())).address,
            Some(Sha256::digest(b"127.0.0.1").to_vec())
        );
        let a = Subjects::new("a@example.com", Some("198.51.100.7".parse().unwrap()));
        let b = Subjects::new("a@example.com", Some("198.51.100.8".parse().unwrap()));
        assert_eq!(a.email, b.email);
        assert_ne!(a.pair, b.pair, "one pair per address");
        assert_eq!(Subjects::new("a@example.com", None).scoped().count(), 2);
    }
}
