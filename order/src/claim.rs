//! The claim rule: a unit reserved with a gate pass. Any number of claims are one
//! set-based statement (a lone claim is a claim of one); the process's claimer sends the
//! claims that arrive while a flush is in flight together in the next one.
//!
//! The statement, in autocommit (it checks its own counts and aborts whole if they
//! disagree):
//! - each request is classified from the committed rows: the member at the purchase cap
//!   or holding a live reservation of the product, a second claim of one member and
//!   product in the flush (only the first goes on), a claim past the window its hold
//!   allows (see [`crate::funds`]);
//! - per product, as many `AVAILABLE` units as requests go on are locked with
//!   `LIMIT n FOR UPDATE SKIP LOCKED`, so buyers never queue on one row;
//! - the reservations are inserted joined to those units by number, in (product,
//!   member, pass) order, with `ON CONFLICT DO NOTHING` over every unique constraint:
//!   a conflict (a pass already used, by a row committed before or meanwhile; the
//!   member's other claim committed meanwhile) skips that one request instead of
//!   failing the statement;
//! - only the units whose reservation was inserted move to `RESERVED`; a unit locked
//!   for a skipped request stays `AVAILABLE`, its lock released at the commit.
//!
//! No request can fail the others, so a flush has no fallback: a conflict is told
//! apart after the commit (its pass on a reservation now: used; a live reservation on
//! its unit, tables broken by hand: that claim alone fails with the breach; else the
//! member's limit).

use std::{collections::HashMap, time::Instant};

use chrono::{DateTime, Utc};
use paysaga_common::{auth::MemberId, batch::Coalescer, retry};
use sqlx::{FromRow, PgPool, Row};
use uuid::Uuid;

use crate::{
    api::{Reservation, ReservationState},
    breach::{Breach, Holder},
    claim_alternatives::{Alternatives, ClaimStrategy},
    error::{self, Error, Result},
    reservations::ReservationRow,
    states::{Text, UnitState},
};

/// One claim: a unit of `product_id` for `member`, admitted by the pass `pass_id`,
/// funded by the hold placed for reservation `id` (see [`crate::funds`]).
#[derive(Debug, Clone)]
pub struct NewClaim {
    /// The reservation's id, the one its hold's key names.
    pub id: Uuid,
    pub product_id: i64,
    pub member: MemberId,
    pub pass_id: Uuid,
    /// The hold's deadline, which the reservation takes as its own: both end at the
    /// same instant.
    pub expires_at: DateTime<Utc>,
    /// The latest moment the reservation may be made: past it, the hold may be judged
    /// abandoned and released, so the claim is refused instead.
    pub claim_by: DateTime<Utc>,
    /// How many units of the product a member may hold or have bought at once (their
    /// `RESERVED` and `CONFIRMED` reservations).
    pub cap: i64,
    /// The account the hold is on, which the reservation names; `None` for a claim
    /// made without a hold.
    pub account_id: Option<i64>,
}

impl NewClaim {
    /// A claim of the statement alone, as the claim bench and tests drive it: a fresh
    /// reservation id, its deadline `ttl` from now, no window. The service's claims are
    /// made from a hold placed first (see [`crate::funds`]).
    pub fn unfunded(
        product_id: i64,
        member: MemberId,
        pass_id: Uuid,
        ttl: std::time::Duration,
        cap: i64,
    ) -> Self {
        let now = Utc::now();
        NewClaim {
            id: Uuid::now_v7(),
            product_id,
            member,
            pass_id,
            expires_at: now + chrono::Duration::from_std(ttl).unwrap_or_default(),
            claim_by: now + chrono::Duration::days(1),
            cap,
            account_id: None,
        }
    }
}

/// How a claim ended.
#[derive(Debug)]
pub enum Claim {
    Created(Reservation),
    /// No AVAILABLE unit could be locked (sold out, unknown product, or all remaining
    /// units momentarily locked by other transactions).
    NothingClaimable,
    /// The pass id is already on a reservation (a replay, or a replay racing its
    /// original).
    PassUsed,
    /// The member already holds a live reservation of the product, or has reserved and
    /// bought as many units as the cap allows (or claimed twice in one flush).
    MemberLimit,
    /// The claim came after its `claim_by`: nothing was claimed.
    TooLate,
    /// A benchmark alternative's optimistic check lost to another claim, on every try
    /// ([`crate::claim_alternatives`]): nothing was claimed.
    Contended,
}

/// What the statement says of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Created,
    MemberLimit,
    Nothing,
    Late,
    /// Its insert met an existing row: its pass used, the member's other claim
    /// committed meanwhile, or its unit held (told apart by [`resolve`]).
    Conflict,
}

impl std::str::FromStr for Outcome {
    type Err = UnknownOutcome;
    fn from_str(s: &str) -> Result<Self, UnknownOutcome> {
        Ok(match s {
            "CREATED" => Outcome::Created,
            "MEMBER_LIMIT" => Outcome::MemberLimit,
            "NOTHING" => Outcome::Nothing,
            "LATE" => Outcome::Late,
            "CONFLICT" => Outcome::Conflict,
            _ => return Err(UnknownOutcome(s.to_owned())),
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown claim outcome {0:?}")]
pub struct UnknownOutcome(String);

/// Claims a unit for each of `claims` in one statement and answers each, in order.
/// `Err` means nothing was written; an inner `Err` is that one claim's breach.
#[tracing::instrument(skip_all, fields(claims = claims.len()))]
pub async fn claim(pool: &PgPool, claims: &[NewClaim]) -> Result<Vec<Result<Claim>>> {
    let start = Instant::now();
    // An answer is matched to its request by the reservation id as well as by position.
    let ids: Vec<Uuid> = claims.iter().map(|c| c.id).collect();
    // A deadlock PostgreSQL broke rolled the statement back whole.
    let rows = retry::on_conflict(Error::is_conflict, || run(pool, claims, &ids)).await?;
    let (mut answers, conflicted) = read_answers(&rows, &ids)?;
    if !conflicted.is_empty() {
        resolve(pool, claims, &conflicted, &mut answers).await?;
    }
    metrics::histogram!("order_claim_flush_seconds").record(start.elapsed().as_secs_f64());
    Ok(answers)
}

/// The claims whose insert met an existing row: their place, and the unit locked for them.
pub(crate) type Conflicted = Vec<(usize, i64)>;

/// Each claim's answer from the statement's rows, in order, and the claims whose insert
/// met an existing row, for [`resolve`].
pub(crate) fn read_answers(
    rows: &[sqlx::postgres::PgRow],
    ids: &[Uuid],
) -> Result<(Vec<Result<Claim>>, Conflicted)> {
    Breach::check_count("claim", "answers", ids.len(), rows.len()).map_err(Error::Invariant)?;
    let mut answers = Vec::with_capacity(rows.len());
    let mut conflicted = Vec::new();
    for (at, row) in rows.iter().enumerate() {
        let ord: i64 = row.try_get("ord")?;
        if usize::try_from(ord).ok() != Some(at + 1) {
            return Err(Error::Invariant(Breach::count(
                "claim",
                "answer in place",
                at as i64 + 1,
                ord,
            )));
        }
        let Text(outcome) = row.try_get::<Text<Outcome>, _>("outcome")?;
        answers.push(match outcome {
            Outcome::Created => {
                let r = Reservation::from(ReservationRow::from_row(row)?);
                if r.id != ids[at] {
                    return Err(Error::Invariant(Breach::missing(
                        "reservation answered for claim",
                        ids[at],
                    )));
                }
                Ok(Claim::Created(r))
            }
            Outcome::MemberLimit => Ok(Claim::MemberLimit),
            Outcome::Nothing => Ok(Claim::NothingClaimable),
            Outcome::Late => Ok(Claim::TooLate),
            Outcome::Conflict => {
                let unit: Option<i64> = row.try_get("locked_unit")?;
                conflicted.push((at, unit.unwrap_or_default()));
                Ok(Claim::MemberLimit)
            }
        });
    }
    Ok((answers, conflicted))
}

/// Each claim's place among the claims of its member and product, in order (1 for the
/// first): only a first one goes on to a unit.
fn places(claims: &[NewClaim]) -> Vec<i64> {
    let mut seen: HashMap<(i64, &str), i64> = HashMap::with_capacity(claims.len());
    claims
        .iter()
        .map(|c| {
            let n = seen.entry((c.product_id, c.member.as_str())).or_default();
            *n += 1;
            *n
        })
        .collect()
}

/// Tells apart the claims whose insert met an existing row, now that the statement has
/// committed and any other transaction's row is visible: their pass on a reservation is
/// the replay (`PassUsed`); a live reservation on the unit locked for them is a breach
/// (tables broken by hand: that claim alone fails); otherwise the member's other claim
/// won (`MemberLimit`). Rare: replays of a pass whose reservation ended, and races.
pub(crate) async fn resolve(
    pool: &PgPool,
    claims: &[NewClaim],
    conflicted: &[(usize, i64)],
    answers: &mut [Result<Claim>],
) -> Result<()> {
    let passes: Vec<Uuid> = conflicted
        .iter()
        .map(|&(at, _)| claims[at].pass_id)
        .collect();
    let units: Vec<i64> = conflicted.iter().map(|&(_, unit)| unit).collect();
    let used = crate::reservations::used_passes(pool, &passes).await?;
    let held: Vec<(i64, Uuid, Text<ReservationState>)> = sqlx::query_as(
        r#"
        SELECT unit_id, id, state
        FROM reservations
        WHERE unit_id = ANY($1) AND state IN ('RESERVED', 'CONFIRMED')
        "#,
    )
    .bind(&units)
    .fetch_all(pool)
    .await?;
    for &(at, unit) in conflicted {
        let holder = held.iter().find(|h| h.0 == unit);
        answers[at] = if used.contains(&claims[at].pass_id) {
            Ok(Claim::PassUsed)
        } else if let Some((unit_id, id, Text(state))) = holder {
            Err(Error::Invariant(Breach::Unit {
                unit_id: *unit_id,
                holder: Some(Holder::Reservation(*id)),
                expected: match state {
                    ReservationState::Confirmed => UnitState::Sold,
                    _ => UnitState::Reserved,
                },
                found: Some(UnitState::Available),
            }))
        } else {
            Ok(Claim::MemberLimit)
        };
    }
    Ok(())
}

/// The statement, on a connection settled after a failure (so a retry or the next
/// flush does not meet its unit locks).
async fn run(
    pool: &PgPool,
    claims: &[NewClaim],
    ids: &[Uuid],
) -> Result<Vec<sqlx::postgres::PgRow>> {
    let mut conn = pool.acquire().await?;
    match statement(&mut conn, claims, ids).await {
        Ok(rows) => Ok(rows),
        Err(e) => {
            error::settle(&mut conn).await;
            Err(error::from_statement(e))
        }
    }
}

/// The claim statement on `conn`: alone in autocommit (the service's claim), or inside a
/// transaction that took a lock first (the alternatives of [`crate::claim_alternatives`]).
pub(crate) async fn statement(
    conn: &mut sqlx::PgConnection,
    claims: &[NewClaim],
    ids: &[Uuid],
) -> Result<Vec<sqlx::postgres::PgRow>, sqlx::Error> {
    sqlx::query(
        r#"
        WITH req AS MATERIALIZED (
            SELECT r.id, r.product_id, r.member_id, r.pass_id, r.expires_at, r.cap, r.m,
                   r.claim_by <= clock_timestamp() AS late, r.account_id, r.ord
            FROM UNNEST($1::UUID[], $2::BIGINT[], $3::TEXT[], $4::UUID[], $5::TIMESTAMPTZ[],
                        $6::BIGINT[], $7::BIGINT[], $8::TIMESTAMPTZ[], $9::BIGINT[])
                 WITH ORDINALITY AS r (id, product_id, member_id, pass_id, expires_at, cap, m,
                                       claim_by, account_id, ord)
        ), classified AS MATERIALIZED (
            -- A LATERAL probe with a LIMIT, so that it stays one index probe per request
            -- on any plan: as a plain subquery, the generic plan made while the table
            -- was small intersected bitmaps of every live reservation, a cost growing
            -- with the drop. (A pass already used is found by the insert's conflict.)
            SELECT r.id, r.product_id, r.member_id, r.pass_id, r.expires_at, r.cap, r.ord,
                   h.held, h.live, r.m, r.late, r.account_id
            FROM req r
            -- Counted up to the cap only: that is all the comparison needs. Read along the
            -- member's own reservations, in the order of their index. The live states
            -- are named as the states that are not final: `IN ('RESERVED', 'CONFIRMED')`
            -- would also match the predicate of the partial index of live units, and a
            -- generic plan made on small tables read that whole index for every claim.
            CROSS JOIN LATERAL (
                SELECT COUNT(*) AS held, COALESCE(bool_or(y.state = 'RESERVED'), FALSE) AS live
                FROM (
                    SELECT x.state
                    FROM reservations x
                    WHERE x.member_id = r.member_id AND x.product_id = r.product_id
                      AND x.state NOT IN ('CANCELLED', 'EXPIRED')
                    ORDER BY x.member_id, x.created_at
                    LIMIT r.cap
                ) y
            ) h
        ), fresh AS MATERIALIZED (
            SELECT c.id, c.product_id, c.member_id, c.pass_id, c.expires_at, c.account_id, c.ord,
                   row_number() OVER (PARTITION BY c.product_id ORDER BY c.ord) AS k
            FROM classified c
            -- One claim per member and product per flush, under the cap, none beside a
            -- live reservation, none after its hold's window.
            WHERE c.m = 1 AND c.held < c.cap AND NOT c.live AND NOT c.late
        ), wanted AS (
            SELECT f.product_id, COUNT(*) AS n
            FROM fresh f
            GROUP BY f.product_id
        ), locked AS MATERIALIZED (
            SELECT u.id, u.product_id
            FROM wanted w
            -- Through the partial index of AVAILABLE units, on any plan: the product as a
            -- range (not an equality) makes (product_id, id) an order only that index
            -- gives. With `product_id = ...` the primary key gives the same order, and a
            -- generic plan made from stock analysed while every unit was on sale took it,
            -- walking every unit sold or held before the first one free; without an order,
            -- a heap scan from the first page.
            CROSS JOIN LATERAL (
                SELECT s.id, s.product_id
                FROM product_stock s
                WHERE s.product_id >= w.product_id AND s.product_id <= w.product_id
                  AND s.state = 'AVAILABLE'
                ORDER BY s.product_id, s.id
                LIMIT w.n
                FOR UPDATE SKIP LOCKED
            ) u
        ), units AS MATERIALIZED (
            SELECT l.id, l.product_id, row_number() OVER (PARTITION BY l.product_id ORDER BY l.id) AS k
            FROM locked l
        ), inserted AS (
            -- In (product, member, pass) order: the conflicts it can wait on (the same
            -- pass, the member's live reservation) are all within one member and
            -- product, so two flushes waiting on each other's inserts cannot deadlock.
            INSERT INTO reservations (id, product_id, unit_id, member_id, pass_id, price, state, expires_at,
                                      account_id)
            SELECT f.id, f.product_id, u.id, f.member_id, f.pass_id, p.price, 'RESERVED',
                   f.expires_at, f.account_id
            FROM fresh f
            JOIN units u ON u.product_id = f.product_id AND u.k = f.k
            JOIN products p ON p.id = f.product_id
            ORDER BY f.product_id, f.member_id, f.pass_id
            ON CONFLICT DO NOTHING
            RETURNING id, product_id, member_id, unit_id, price, state, expires_at, order_id, account_id,
                      created_at, updated_at
        ), claimed AS (
            UPDATE product_stock s
            SET state = 'RESERVED', updated_at = now()
            FROM inserted i
            -- By primary key alone. No guard on the state: the unit is this statement's,
            -- locked since it was found AVAILABLE; naming the state (or the product) let
            -- a generic plan walk the whole partial index of units on sale (or the
            -- product's (product_id, state) index) instead.
            WHERE s.id = i.unit_id
            RETURNING s.id
        ), tally AS MATERIALIZED (
            SELECT CASE WHEN c.claimed = c.created THEN 0
                        ELSE invariant_breach(jsonb_build_object(
                                 'kind', 'count', 'statement', 'claim',
                                 'what', 'units moved for new reservations',
                                 'expected', c.created, 'found', c.claimed))
                   END AS breach
            FROM (SELECT (SELECT COUNT(*) FROM claimed) AS claimed,
                         (SELECT COUNT(*) FROM inserted) AS created) c
        )
        SELECT r.ord, t.breach,
               CASE WHEN i.id IS NOT NULL THEN 'CREATED'
                    WHEN r.held >= r.cap OR r.live THEN 'MEMBER_LIMIT'
                    -- A second claim of one member in the flush: over the limit if the
                    -- first made a reservation, else nothing was claimable for either.
                    WHEN r.m > 1 THEN CASE WHEN EXISTS (
                             SELECT 1 FROM inserted i2
                             WHERE i2.product_id = r.product_id AND i2.member_id = r.member_id)
                         THEN 'MEMBER_LIMIT' ELSE 'NOTHING' END
                    WHEN r.late THEN 'LATE'
                    WHEN u.id IS NULL THEN 'NOTHING'
                    ELSE 'CONFLICT' END AS outcome,
               u.id AS locked_unit,
               i.id, i.product_id, i.member_id, i.unit_id, i.price, i.state, i.expires_at,
               i.order_id, i.account_id, i.created_at, i.updated_at
        FROM classified r
        CROSS JOIN tally t
        LEFT JOIN fresh f ON f.ord = r.ord
        LEFT JOIN units u ON u.product_id = f.product_id AND u.k = f.k
        -- Copies of one pass share its reservation id: the row is the answer of the copy
        -- that went on to a unit only.
        LEFT JOIN inserted i ON i.id = r.id AND f.ord IS NOT NULL
        ORDER BY r.ord
        "#,
    )
    .bind(ids)
    .bind(claims.iter().map(|c| c.product_id).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.member.as_str()).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.pass_id).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.expires_at).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.cap).collect::<Vec<_>>())
    .bind(places(claims))
    .bind(claims.iter().map(|c| c.claim_by).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.account_id).collect::<Vec<_>>())
    .fetch_all(&mut *conn)
    .await
}

/// The process's claimer: group commit through a [`Coalescer`] (claims that arrive
/// while a flush is in flight leave together in the next; a lone claim leaves at once),
/// or, with a batch size of one, every claim its own statement. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Claims {
    pool: PgPool,
    batcher: Option<Coalescer<NewClaim, Result<Claim>, Error>>,
    /// A benchmark alternative in place of the statement (`CLAIM_STRATEGY`), if set.
    alternative: Option<Alternatives>,
}

impl Claims {
    /// The claims batcher, when `max_batch > 1`; with a strategy other than the default,
    /// that alternative instead, each claim its own transaction.
    pub fn new(pool: PgPool, max_batch: usize, in_flight: usize, strategy: ClaimStrategy) -> Self {
        if strategy != ClaimStrategy::UnitsSkipLocked {
            return Self {
                alternative: Some(Alternatives::new(pool.clone(), strategy)),
                pool,
                batcher: None,
            };
        }
        let batcher = (max_batch > 1).then(|| {
            let p = pool.clone();
            Coalescer::new(
                "claims",
                max_batch,
                in_flight,
                move |claims: Vec<NewClaim>| {
                    let pool = p.clone();
                    async move {
                        claim(&pool, &claims).await.inspect_err(|e| {
                            metrics::counter!("order_claim_flush_errors_total").increment(1);
                            tracing::warn!(error = %e, claims = claims.len(),
                            "claim flush failed; each of its claims is answered with its error");
                        })
                    }
                },
            )
        });
        Self {
            pool,
            batcher,
            alternative: None,
        }
    }

    /// Claims a unit, sharing the statement and commit with the claims that wait
    /// alongside it. A flush that fails as a whole wrote nothing; its error is this
    /// claim's (503 when the database was out of reach, else 500).
    pub async fn claim(&self, req: NewClaim) -> Result<Claim> {
        if let Some(alternative) = &self.alternative {
            return alternative.claim(&req).await;
        }
        let Some(batcher) = &self.batcher else {
            return claim(&self.pool, std::slice::from_ref(&req))
                .await?
                .pop()
                .ok_or_else(|| Error::Invariant(Breach::count("claim", "answers", 1, 0)))?;
        };
        let _waiting = Waiting::new();
        batcher.submit(req).await.map_err(Error::Batch)?
    }
}

/// Counts a claim in `order_claims_waiting` (queued or in a flush) until dropped, so
/// a claim whose caller went away is not counted forever.
struct Waiting(metrics::Gauge);

impl Waiting {
    fn new() -> Self {
        let gauge = metrics::gauge!("order_claims_waiting");
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}
