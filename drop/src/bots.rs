//! A bot attack on a drop, scripted the way attackers run one, and what PostgreSQL says
//! the bots got. Bot accounts that may not buy (unfunded, or made after the drop was
//! announced) take passes and try to reserve, again and again with a short pause,
//! while the real buyers race; bots sign up from a handful of addresses while members
//! sign in.
//!
//! The member service knows a client by its address: the connection's peer, or the
//! `X-Forwarded-For` hop a trusted proxy (`TRUSTED_PROXIES`) appended. The sign-up
//! flood and the sign-ins here play that proxy: they come from loopback, which the
//! system under test trusts, each carrying its client's address (documentation ranges:
//! bots from 198.51.100.0/24, members from 203.0.113.0/24).

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::StreamExt;
use paysaga_common::client::CallError;
use paysaga_contracts::{
    gate::client::GateClient,
    member::api::{codes, Credentials},
    order::client::OrderClient,
};
use rand::Rng;
use sqlx::PgPool;

use crate::{
    invariants::counts,
    setup::{buyer_email, Admin, BUYER_PASSWORD},
    stats::Latency,
    Buyer, Driver,
};

/// The address of bot client `i`.
pub fn bot_address(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1 + (i % 250) as u8))
}

/// The address member `i` signs in from.
pub fn member_address(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1 + (i % 250) as u8))
}

/// How far ahead of the buyers bots arrive: scripts fire the moment a drop opens.
pub const HEAD_START: Duration = Duration::from_millis(300);

/// The bot accounts of an attack, made through the bulk path before the race (the
/// sign-up limits would stop them at the front door, which [`sign_up_flood`] shows).
#[derive(Debug, Clone)]
pub struct Bots {
    /// Old enough to take part, with nothing on their accounts.
    pub unfunded: Vec<Buyer>,
    /// Funded, but made after the announcement.
    pub too_new: Vec<Buyer>,
    /// The drop's announcement: the products of the attack admit only accounts made
    /// before it.
    pub announced: chrono::DateTime<chrono::Utc>,
}

impl Bots {
    /// `count` bots named `<prefix>-unfunded-<i>` and `<prefix>-new-<i>`, half and half
    /// (the odd one unfunded): the unfunded ones first, then the announcement, then the
    /// funded ones with `balance` each. Every account seeded before this call is older
    /// than the announcement. A member id's timestamp (UUIDv7, the sign-up moment) has
    /// millisecond precision: the announcement is kept a few milliseconds clear of the
    /// seedings on both sides so no id shares its millisecond.
    pub async fn seed(
        admin: &Admin,
        prefix: &str,
        count: usize,
        balance: i64,
    ) -> anyhow::Result<Self> {
        let too_new = count / 2;
        let unfunded = admin
            .open_buyers(&format!("{prefix}-unfunded"), &vec![0; count - too_new], 4)
            .await
            .context("seeding the unfunded bots")?;
        let gap = Duration::from_millis(5);
        tokio::time::sleep(gap).await;
        let announced = chrono::Utc::now();
        tokio::time::sleep(gap).await;
        let too_new = admin
            .open_buyers(&format!("{prefix}-new"), &vec![balance; too_new], 4)
            .await
            .context("seeding the bots made after the announcement")?;
        Ok(Self {
            unfunded,
            too_new,
            announced,
        })
    }

    /// Every bot, unfunded first.
    pub fn all(&self) -> Vec<Buyer> {
        self.unfunded.iter().chain(&self.too_new).cloned().collect()
    }

    /// Every bot's member id.
    pub fn members(&self) -> Vec<String> {
        self.unfunded
            .iter()
            .chain(&self.too_new)
            .map(|b| b.member.clone())
            .collect()
    }

    /// A product of `units` at `price` admitting only accounts made before the
    /// announcement.
    pub async fn product(
        &self,
        admin: &Admin,
        name: &str,
        price: i64,
        units: i64,
    ) -> anyhow::Result<paysaga_contracts::order::api::Product> {
        let rule = paysaga_contracts::eligibility::EligibilityRule::AccountCreatedBefore {
            at: self.announced,
        };
        admin
            .create_product_for(name, price, units, vec![rule])
            .await
    }
}

/// What the bots did and were told.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BotTally {
    /// Requests sent, passes and reservations together.
    pub requests: u64,
    /// Passes the gate granted to bots (a funded buyer's pass costs the bot nothing).
    pub passes: u64,
    /// Reservations the order service granted to bots: each one a failed defence.
    pub reservations: u64,
    /// Answers by step, status and code (`pass 403 ACCOUNT_TOO_NEW`).
    pub answers: BTreeMap<String, u64>,
}

impl BotTally {
    fn note(&mut self, answer: String) {
        *self.answers.entry(answer).or_default() += 1;
    }

    fn add(mut self, other: BotTally) -> Self {
        self.requests += other.requests;
        self.passes += other.passes;
        self.reservations += other.reservations;
        for (k, n) in other.answers {
            *self.answers.entry(k).or_default() += n;
        }
        self
    }
}

/// `step status code` of a refused or failed call.
fn answer(step: &str, e: &CallError) -> String {
    let status = e.status().map_or_else(|| "-".to_owned(), |s| s.to_string());
    format!("{step} {status} {}", e.code().unwrap_or("(no code)"))
}

/// `pause`, jittered by ±25 % so bots started together do not move in step.
fn jittered(pause: Duration) -> Duration {
    pause.mul_f64(rand::thread_rng().gen_range(0.75..=1.25))
}

/// Every bot at once, as a script: ask the gate for a pass, reserve with it, and after
/// `pause` do it again, whatever the answer, until `stop` is set. A bot that is granted
/// a reservation goes on trying (it is counted; the attack should never get one).
pub async fn run_bots(
    driver: &Driver,
    bots: &[Buyer],
    product_id: i64,
    pause: Duration,
    stop: Arc<AtomicBool>,
) -> BotTally {
    let each = bots.iter().map(|bot| {
        let stop = stop.clone();
        let gate = GateClient::with_http(driver.http.clone(), &driver.endpoints.gate, &bot.token);
        let order =
            OrderClient::with_http(driver.http.clone(), &driver.endpoints.order, &bot.token);
        async move {
            let mut t = BotTally::default();
            while !stop.load(Ordering::Relaxed) {
                t.requests += 1;
                match gate.issue_pass(product_id).await {
                    Ok(pass) => {
                        t.passes += 1;
                        t.requests += 1;
                        match order.reserve(product_id, &pass.body.pass).await {
                            Ok(r) => {
                                t.reservations += 1;
                                t.note(format!("reserve {}", r.status));
                            }
                            Err(e) => t.note(answer("reserve", &e)),
                        }
                    }
                    Err(e) => t.note(answer("pass", &e)),
                }
                tokio::time::sleep(jittered(pause)).await;
            }
            t
        }
    });
    futures::future::join_all(each)
        .await
        .into_iter()
        .fold(BotTally::default(), BotTally::add)
}

/// How one POST from a client address was answered.
struct Answered {
    status: u16,
    code: Option<String>,
    retry_after: bool,
    /// From the first request to this answer, lost ones included.
    took: Duration,
    /// Requests sent before this one that got no answer (the connection failed).
    lost: u32,
}

/// Requests whose connection fails are sent again, at most this many times.
const LOST_RETRIES: u32 = 5;

/// `POST url` with `body`, as the trusted proxy forwarding the request of the client at
/// `from`; sent again after a pause when the connection fails (a loaded service cuts a
/// connection whose request it did not read in time, before reading it).
async fn post_from(
    http: &reqwest::Client,
    url: &str,
    body: &Credentials,
    from: IpAddr,
) -> Result<Answered, String> {
    let start = Instant::now();
    let mut lost = 0;
    let response = loop {
        let sent = http
            .post(url)
            .header("x-forwarded-for", from.to_string())
            .json(body)
            .send()
            .await;
        match sent {
            Ok(r) => break r,
            Err(e) if lost < LOST_RETRIES => {
                tracing::debug!(error = %e, "no answer; asking again");
                lost += 1;
                tokio::time::sleep(jittered(Duration::from_millis(50) * lost)).await;
            }
            Err(e) => {
                let mut chain = format!("request failed: {e}");
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    chain.push_str(&format!(": {s}"));
                    source = s.source();
                }
                return Err(chain);
            }
        }
    };
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .is_some();
    let code = if response.status().is_success() {
        None
    } else {
        response
            .json::<paysaga_common::ErrorBody>()
            .await
            .ok()
            .map(|b| b.code)
    };
    Ok(Answered {
        status,
        code,
        retry_after,
        took: start.elapsed(),
        lost,
    })
}

/// `status code` of an answer, for the tallies of other answers.
fn other_answer(r: Answered) -> String {
    format!(
        "{} {}",
        r.status,
        r.code.unwrap_or_else(|| "(no code)".into())
    )
}

/// What a sign-up flood got.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Flood {
    /// Bots, and the addresses they came from.
    pub bots: u64,
    pub addresses: u64,
    /// Sign-up requests sent, retries included.
    pub attempts: u64,
    /// Requests whose connection failed before an answer (each sent again).
    pub lost: u64,
    /// Accounts made (201, or 409 `EMAIL_TAKEN` after a request that got no answer:
    /// that one made it).
    pub created: u64,
    /// Answers 429 `TOO_MANY_SIGN_UPS`, and how many of them said when to come back.
    pub refused: u64,
    pub refused_with_retry_after: u64,
    /// Any other answer, by status and code.
    pub other: BTreeMap<String, u64>,
}

impl Flood {
    fn add(mut self, f: Flood) -> Self {
        self.attempts += f.attempts;
        self.lost += f.lost;
        self.created += f.created;
        self.refused += f.refused;
        self.refused_with_retry_after += f.refused_with_retry_after;
        for (k, n) in f.other {
            *self.other.entry(k).or_default() += n;
        }
        self
    }
}

/// `per_address` bots from each of `addresses`, all at once, signing up as
/// `<prefix>-<address>-<i>`; a refused bot asks again after `pause` (a script ignores
/// Retry-After) until it is in or `stop` is set, so with `stop` set beforehand each asks
/// until it has one answer.
pub async fn sign_up_flood(
    http: &reqwest::Client,
    member_url: &str,
    prefix: &str,
    addresses: usize,
    per_address: usize,
    pause: Duration,
    stop: Arc<AtomicBool>,
) -> Flood {
    let url = format!("{member_url}/v1/members");
    let each = (0..addresses).flat_map(|a| (0..per_address).map(move |i| (a, i)));
    let tallies = futures::future::join_all(each.map(|(a, i)| {
        let (url, stop) = (&url, stop.clone());
        let creds = Credentials {
            email: buyer_email(&format!("{prefix}-{a}-{i}")),
            password: BUYER_PASSWORD.to_owned(),
        };
        async move {
            let mut f = Flood::default();
            loop {
                let answer = post_from(http, url, &creds, bot_address(a)).await;
                f.attempts += 1;
                match answer {
                    Ok(r) => {
                        f.attempts += u64::from(r.lost);
                        f.lost += u64::from(r.lost);
                        let made_before =
                            r.lost > 0 && r.code.as_deref() == Some(codes::EMAIL_TAKEN);
                        if r.status == 201 || made_before {
                            f.created += 1;
                            break;
                        }
                        if r.status == 429 && r.code.as_deref() == Some(codes::TOO_MANY_SIGN_UPS) {
                            f.refused += 1;
                            f.refused_with_retry_after += u64::from(r.retry_after);
                        } else {
                            *f.other.entry(other_answer(r)).or_default() += 1;
                        }
                    }
                    Err(e) => *f.other.entry(e).or_default() += 1,
                }
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                tokio::time::sleep(jittered(pause)).await;
            }
            f
        }
    }))
    .await;
    tallies.into_iter().fold(
        Flood {
            bots: (addresses * per_address) as u64,
            addresses: addresses as u64,
            ..Flood::default()
        },
        Flood::add,
    )
}

/// Members signing in: how long each answer took, and what it was.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SignIns {
    /// Every answer's time, whatever it was.
    pub latency: Latency,
    /// Sessions issued (200).
    pub ok: u64,
    /// Requests whose connection failed before an answer (each sent again; the time
    /// counts from the first).
    pub lost: u64,
    /// Any other answer, by status and code.
    pub other: BTreeMap<String, u64>,
}

/// The buyers named `names` (opened by [`Admin::open_buyers`]) sign in once each, the
/// `i`-th from [`member_address`]`(i)`, `concurrency` at a time.
pub async fn sign_ins(
    http: &reqwest::Client,
    member_url: &str,
    names: &[String],
    concurrency: usize,
) -> SignIns {
    let url = format!("{member_url}/v1/sessions");
    let answers: Vec<Result<Answered, String>> = futures::stream::iter(names.iter().enumerate())
        .map(|(i, name)| {
            let creds = Credentials {
                email: buyer_email(name),
                password: BUYER_PASSWORD.to_owned(),
            };
            let url = &url;
            async move { post_from(http, url, &creds, member_address(i)).await }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut s = SignIns::default();
    let mut took = Vec::new();
    for a in answers {
        match a {
            Ok(r) => {
                took.push(r.took);
                s.lost += u64::from(r.lost);
                if r.status == 200 {
                    s.ok += 1;
                } else {
                    *s.other.entry(other_answer(r)).or_default() += 1;
                }
            }
            Err(e) => *s.other.entry(e).or_default() += 1,
        }
    }
    s.latency = Latency::of_durations(&took);
    s
}

/// What some members got of one product, from PostgreSQL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Holdings {
    /// Reservations of the product they ever made, in any state: every unit they held,
    /// however briefly.
    pub reservations: i64,
    /// Of them CONFIRMED: units they bought.
    pub bought: i64,
    /// Holds ever placed on their accounts, for any product.
    pub holds: i64,
}

/// What `members` got of `product_id`. `pool` is an administrator's pool on the
/// system's database.
pub async fn holdings(
    pool: &PgPool,
    product_id: i64,
    members: &[String],
) -> anyhow::Result<Holdings> {
    let [reservations, bought, holds] = counts(
        pool,
        sqlx::query(
            r#"
        SELECT COUNT(*) AS reservations,
               COUNT(*) FILTER (WHERE r.state = 'CONFIRMED') AS bought,
               (SELECT COUNT(*)
                FROM account_service.holds AS h
                JOIN account_service.accounts AS a ON a.id = h.account_id
                WHERE a.member_id = ANY($2)) AS holds
        FROM order_service.reservations AS r
        WHERE r.product_id = $1 AND r.member_id = ANY($2)
        "#,
        )
        .bind(product_id)
        .bind(members),
        "reading what the members got",
    )
    .await?;
    Ok(Holdings {
        reservations,
        bought,
        holds,
    })
}

/// Accounts a [`sign_up_flood`] under `prefix` made, from PostgreSQL (a bot whose answer
/// was lost may have made one without hearing so).
pub async fn flood_accounts(pool: &PgPool, prefix: &str) -> anyhow::Result<i64> {
    let pattern = buyer_email(&format!("{prefix}-%"));
    sqlx::query_scalar(r#"SELECT COUNT(*) FROM member_service.members WHERE email LIKE $1"#)
        .bind(pattern)
        .fetch_one(pool)
        .await
        .context("counting the flood's accounts")
}
