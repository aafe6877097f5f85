//! Limits at the edge: what one request may cost a service (a deadline, a share of a
//! global concurrency budget), how long a slow client may hold a connection, and how
//! often one member may call the endpoints that cost the system the most.
//!
//! The server limits apply to every service through `server::finish` and
//! `server::serve`; the member limiter is called by the handlers that know the member
//! (gate and orchestrator, after the buyer token is verified).

use std::{
    num::NonZeroU32,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use governor::{
    clock::{Clock, DefaultClock, Reference},
    DefaultKeyedRateLimiter, Quota, RateLimiter,
};

use crate::{
    auth::MemberId,
    config::{self, ConfigError},
    error::{codes, with_retry_after, ApiError},
};

/// `HTTP_REQUEST_TIMEOUT_MS` default: far above the orchestrator's `RESPONSE_WAIT_MS`
/// long-poll (3 s) and any downstream timeout, so it only ends requests that are stuck.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// `HTTP_MAX_IN_FLIGHT` default: far above what a drop keeps in flight per instance
/// (the benchmark's busiest service stays in the hundreds), so in the normal case the
/// limit only costs one semaphore permit per request.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 4096;
/// `HTTP_HEADER_READ_TIMEOUT_MS` default. It must stay above the idle time after which
/// paysaga's own clients drop a pooled connection (`client::POOL_IDLE_TIMEOUT`), so the
/// client, not the server, closes an idle connection and no request is sent on a
/// connection the server is closing.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// `MEMBER_RATE_PER_SEC` default. A buyer polling its payment every 50 ms (the test
/// and benchmark driver's cadence) stays under it.
pub const DEFAULT_MEMBER_RATE_PER_SEC: u32 = 20;
/// `MEMBER_RATE_BURST` default: room for a pass, a payment and its retries on top of
/// the polls.
pub const DEFAULT_MEMBER_RATE_BURST: u32 = 40;

/// Seconds a shed or timed-out request is told to wait before retrying.
const RETRY_AFTER_SECS: u64 = 1;

/// The limits every service's HTTP server applies, from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// `HTTP_REQUEST_TIMEOUT_MS`: a request still running after this is answered 503
    /// `TIMEOUT` (the work it started may still complete: a retry must use the same
    /// idempotency key).
    pub request_timeout: Duration,
    /// `HTTP_MAX_IN_FLIGHT`: requests served at once by one instance; one more is
    /// answered 503 `OVERLOADED` at once rather than queued.
    pub max_in_flight: usize,
    /// `HTTP_HEADER_READ_TIMEOUT_MS`: how long a connection may take to deliver a
    /// request's headers, counted from when the server starts waiting for them. hyper
    /// starts that clock also when a keep-alive connection goes idle after a response,
    /// so this is the idle keep-alive timeout too.
    pub header_read_timeout: Duration,
    /// `HTTP_KEEP_ALIVE`: whether connections are reused for further requests
    /// (default true; false closes each connection after its response).
    pub keep_alive: bool,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            keep_alive: true,
        }
    }
}

fn at_least(name: &str, value: Duration, min: Duration) -> Result<Duration, ConfigError> {
    if value < min {
        return Err(ConfigError {
            name: name.to_owned(),
            value: value.as_millis().to_string(),
            reason: format!("must be at least {}", min.as_millis()),
        });
    }
    Ok(value)
}

impl ServerLimits {
    pub fn from_env() -> Result<Self, ConfigError> {
        let d = Self::default();
        let max_in_flight = config::parse("HTTP_MAX_IN_FLIGHT", d.max_in_flight)?;
        if max_in_flight == 0 {
            return Err(ConfigError {
                name: "HTTP_MAX_IN_FLIGHT".into(),
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        Ok(Self {
            request_timeout: at_least(
                "HTTP_REQUEST_TIMEOUT_MS",
                config::millis("HTTP_REQUEST_TIMEOUT_MS", d.request_timeout)?,
                Duration::from_millis(100),
            )?,
            max_in_flight,
            header_read_timeout: at_least(
                "HTTP_HEADER_READ_TIMEOUT_MS",
                config::millis("HTTP_HEADER_READ_TIMEOUT_MS", d.header_read_timeout)?,
                Duration::from_millis(100),
            )?,
            keep_alive: config::parse("HTTP_KEEP_ALIVE", d.keep_alive)?,
        })
    }

    /// The limits from the environment, or the defaults if a variable is invalid.
    /// `server::serve` refuses to start on an invalid one, so this fallback never serves.
    pub fn from_env_or_default() -> Self {
        Self::from_env().unwrap_or_default()
    }
}

/// The answer to a request shed by the concurrency limit: 503 `OVERLOADED`.
pub fn overloaded() -> Response {
    with_retry_after(
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            codes::OVERLOADED,
            "the service is at its limit of requests in flight; retry shortly",
        )
        .into_response(),
        Some(RETRY_AFTER_SECS),
    )
}

/// The answer to a request that outlived `HTTP_REQUEST_TIMEOUT_MS`: 503 `TIMEOUT`. Not
/// a 4xx: the request may have taken effect, so clients must treat it as an unknown
/// outcome and retry (with the same idempotency key), never as a refusal.
pub fn timed_out() -> Response {
    with_retry_after(
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            codes::TIMEOUT,
            "the request did not finish in time; its outcome is unknown, retry it (with the same Idempotency-Key)",
        )
        .into_response(),
        Some(RETRY_AFTER_SECS),
    )
}

/// Per-member request rate: `MEMBER_RATE_PER_SEC` sustained, `MEMBER_RATE_BURST` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberRate {
    pub per_sec: NonZeroU32,
    pub burst: NonZeroU32,
}

impl Default for MemberRate {
    fn default() -> Self {
        Self {
            per_sec: NonZeroU32::new(DEFAULT_MEMBER_RATE_PER_SEC).expect("non-zero"),
            burst: NonZeroU32::new(DEFAULT_MEMBER_RATE_BURST).expect("non-zero"),
        }
    }
}

impl MemberRate {
    pub fn from_env() -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            per_sec: config::parse("MEMBER_RATE_PER_SEC", d.per_sec)?,
            burst: config::parse("MEMBER_RATE_BURST", d.burst)?,
        })
    }
}

/// A request refused by a [`MemberLimiter`]: 429 `RATE_LIMITED` with `Retry-After`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("member rate limit reached; retry after {retry_after_secs}s")]
pub struct RateLimited {
    /// Whole seconds until a request would be allowed, at least 1.
    pub retry_after_secs: u64,
}

impl IntoResponse for RateLimited {
    fn into_response(self) -> Response {
        with_retry_after(
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                codes::RATE_LIMITED,
                "too many requests from this member; retry after the indicated delay",
            )
            .into_response(),
            Some(self.retry_after_secs),
        )
    }
}

/// How often the limiter forgets members whose bucket has refilled: their state says
/// nothing a fresh entry would not, so memory stays bounded by the members active in
/// the last interval rather than every member ever seen.
const PRUNE_EVERY: Duration = Duration::from_secs(10);

/// A GCRA rate limit per member (governor's keyed limiter), one per instance. Refused
/// requests consume nothing, so a member who waits as told gets through.
pub struct MemberLimiter {
    limiter: DefaultKeyedRateLimiter<String>,
    /// When the store was last pruned, in nanoseconds since `start` of the clock.
    pruned_at: AtomicU64,
    start: <DefaultClock as Clock>::Instant,
}

impl std::fmt::Debug for MemberLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberLimiter")
            .field("members", &self.limiter.len())
            .finish_non_exhaustive()
    }
}

impl MemberLimiter {
    pub fn new(rate: MemberRate) -> Self {
        Self::with_quota(Quota::per_second(rate.per_sec).allow_burst(rate.burst))
    }

    /// A limiter that lets `burst` requests through at once, then one more every
    /// `period` (for rare, guarded requests such as staff sign-in attempts). A zero
    /// `period` is taken as one millisecond.
    pub fn every(period: Duration, burst: NonZeroU32) -> Self {
        let quota = Quota::with_period(period.max(Duration::from_millis(1)))
            .expect("a period of at least 1 ms")
            .allow_burst(burst);
        Self::with_quota(quota)
    }

    fn with_quota(quota: Quota) -> Self {
        let limiter = RateLimiter::keyed(quota);
        let start = limiter.clock().now();
        Self {
            limiter,
            pruned_at: AtomicU64::new(0),
            start,
        }
    }

    /// Counts one request of `member`: `Ok` if it is within the rate, else how long to wait.
    pub fn check(&self, member: &MemberId) -> Result<(), RateLimited> {
        self.check_key(member.as_str())
    }

    /// Counts one request under any `key` (an address, an email): `Ok` if it is within
    /// the rate, else how long to wait.
    pub fn check_key(&self, key: &str) -> Result<(), RateLimited> {
        self.prune_if_due();
        match self.limiter.check_key(&key.to_owned()) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.limiter.clock().now());
                metrics::counter!("paysaga_member_rate_limited_total").increment(1);
                Err(RateLimited {
                    retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
                })
            }
        }
    }

    /// Members currently tracked (for tests and metrics).
    pub fn tracked(&self) -> usize {
        self.limiter.len()
    }

    /// Prunes the store at most once per [`PRUNE_EVERY`], on whichever request comes
    /// first after it is due, so no background task is needed; the compare-exchange
    /// lets exactly one caller do it.
    fn prune_if_due(&self) {
        let now = self.limiter.clock().now().duration_since(self.start);
        let now = u64::try_from(Duration::from(now).as_nanos()).unwrap_or(u64::MAX);
        let last = self.pruned_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) < PRUNE_EVERY.as_nanos() as u64 {
            return;
        }
        if self
            .pruned_at
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
            metrics::gauge!("paysaga_member_rate_tracked").set(self.limiter.len() as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    fn rate(per_sec: u32, burst: u32) -> MemberRate {
        MemberRate {
            per_sec: NonZeroU32::new(per_sec).unwrap(),
            burst: NonZeroU32::new(burst).unwrap(),
        }
    }

    #[test]
    fn a_burst_is_allowed_then_refused_with_a_wait_of_at_least_a_second() {
        let limiter = MemberLimiter::new(rate(1, 3));
        let alice = MemberId::parse("alice").unwrap();
        let bob = MemberId::parse("bob").unwrap();
        for _ in 0..3 {
            limiter.check(&alice).expect("within the burst");
        }
        let refused = limiter.check(&alice).expect_err("past the burst");
        assert!(refused.retry_after_secs >= 1);
        limiter
            .check(&bob)
            .expect("another member has a bucket of their own");
        assert_eq!(limiter.tracked(), 2);
    }

    #[test]
    fn refusals_answer_429_with_retry_after() {
        let response = RateLimited {
            retry_after_secs: 2,
        }
        .into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    }

    #[test]
    fn defaults_leave_room_for_a_buyer_polling_every_50ms() {
        let d = MemberRate::default();
        assert!(d.per_sec.get() >= 20 && d.burst >= d.per_sec);
        let s = ServerLimits::default();
        assert!(s.request_timeout >= Duration::from_secs(10));
    }
}
