//! Group commit of claims: reservations requested while earlier claim flushes are in
//! flight go to PostgreSQL together, one set-based statement and one commit per flush,
//! each buyer still getting the answer the single claim would give.
//!
//! The statement (alone, in autocommit: it checks its own counts and fails whole if
//! they disagree): the requests whose pass
//! is not on a reservation yet are numbered per product; per product, as many
//! `AVAILABLE` units as requests are locked with `LIMIT n FOR UPDATE SKIP LOCKED` and
//! numbered the same way; the reservations are inserted joined by that number, with
//! `ON CONFLICT ... DO NOTHING` on the pass; only the units whose reservation was
//! inserted are then moved to `RESERVED`. A pass that conflicts (a replay racing its
//! original in another transaction) fails alone and its unit stays `AVAILABLE`, its
//! lock released when the statement commits.

use std::{
    collections::{hash_map::Entry, HashMap},
    time::{Duration, Instant},
};

use paysaga_common::{auth::MemberId, batch::Coalescer};
use sqlx::{FromRow, PgConnection, PgPool, Row};
use uuid::Uuid;

use crate::{
    api::Reservation,
    error::{self, Error, Result},
    reservations::{self, Claim, ClaimRequest, ReservationRow},
};

/// One claim as it waits for its flush: [`ClaimRequest`], owned.
#[derive(Debug, Clone)]
pub struct NewClaim {
    pub product_id: i64,
    pub member: MemberId,
    pub pass_id: Uuid,
    pub ttl: Duration,
    pub cap: i64,
}

impl NewClaim {
    fn from_request(req: &ClaimRequest<'_>) -> Self {
        Self {
            product_id: req.product_id,
            member: req.member.clone(),
            pass_id: req.pass_id,
            ttl: req.ttl,
            cap: req.cap,
        }
    }
}

/// The process's claimer: group commit through a [`Coalescer`], or, with a batch size
/// of one, every claim in its own statement ([`reservations::claim`]). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Claims {
    pool: PgPool,
    batcher: Option<Coalescer<NewClaim, Claim, Error>>,
}

impl Claims {
    /// The claims batcher, when `max_batch > 1`.
    pub fn new(pool: PgPool, max_batch: usize, in_flight: usize) -> Self {
        let batcher = (max_batch > 1).then(|| {
            let p = pool.clone();
            Coalescer::new("claims", max_batch, in_flight, move |claims: Vec<NewClaim>| {
                let pool = p.clone();
                async move {
                    claim_many(&pool, &claims).await.inspect_err(|e| {
                        tracing::warn!(error = %e, claims = claims.len(),
                            "claim flush failed; each of its claims falls back to its own statement");
                    })
                }
            })
        });
        Self { pool, batcher }
    }

    /// [`reservations::claim`], answered the same way but sharing its statement and
    /// commit with the claims that wait alongside it. If the flush fails as a whole
    /// (one claim's error rolls back all of them), the claim is retried once alone, so
    /// its answer is its own: the others' error does not become its error.
    pub async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim> {
        let Some(batcher) = &self.batcher else {
            return reservations::claim(&self.pool, req).await;
        };
        let flushed = {
            let _waiting = Waiting::new();
            batcher.submit(NewClaim::from_request(req)).await
        };
        match flushed {
            Ok(claim) => Ok(claim),
            Err(_) => {
                metrics::counter!("order_claim_fallbacks_total").increment(1);
                reservations::claim(&self.pool, req).await
            }
        }
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

/// Claims a unit for each of `claims` in one transaction and answers each as
/// [`reservations::claim`] would, in order (a flush of one is that claim itself). Claims repeating an earlier one's pass (a
/// buyer's concurrent retries) are not sent: they get the answer a second claim of
/// that pass racing the first gets alone, `PassUsed` (then the replay) if the first
/// made a reservation, else the first's answer. `Err` means nothing was written.
#[tracing::instrument(skip_all, fields(claims = claims.len()))]
pub async fn claim_many(pool: &PgPool, claims: &[NewClaim]) -> Result<Vec<Claim>> {
    let start = Instant::now();
    let mut first_of_pass: HashMap<Uuid, usize> = HashMap::with_capacity(claims.len());
    let mut sent: Vec<&NewClaim> = Vec::with_capacity(claims.len());
    // For each claim, its position in `sent` and whether it is the one sent.
    let mut slots: Vec<(usize, bool)> = Vec::with_capacity(claims.len());
    for c in claims {
        match first_of_pass.entry(c.pass_id) {
            Entry::Occupied(e) => slots.push((*e.get(), false)),
            Entry::Vacant(e) => {
                e.insert(sent.len());
                slots.push((sent.len(), true));
                sent.push(c);
            }
        }
    }

    let outcomes = match sent[..] {
        // Alone, the single claim's statement: one round trip, no explicit transaction,
        // so a claim at low load costs what it did before group commit.
        [lone] => vec![
            reservations::claim(
                pool,
                &ClaimRequest {
                    product_id: lone.product_id,
                    member: &lone.member,
                    pass_id: lone.pass_id,
                    ttl: lone.ttl,
                    cap: lone.cap,
                },
            )
            .await?,
        ],
        _ => claim_distinct(pool, &sent).await?,
    };
    // A repeat of a pass is answered from its first claim: nothing claimable (or the
    // member's limit) stays that; a reservation made makes the repeat a used pass.
    let found_nothing: Vec<Option<Claim>> = outcomes
        .iter()
        .map(|o| match o {
            Claim::NothingClaimable => Some(Claim::NothingClaimable),
            Claim::MemberLimit => Some(Claim::MemberLimit),
            Claim::Created(_) | Claim::PassUsed => None,
        })
        .collect();
    // The sent claims come in `slots` in the order they were sent, so their outcomes
    // are taken in turn.
    let mut outcomes = outcomes.into_iter();
    let answers = slots
        .iter()
        .map(|&(at, was_sent)| match (was_sent, &found_nothing[at]) {
            (true, _) => outcomes.next().ok_or_else(|| {
                Error::Invariant("claim flush: fewer outcomes than claims sent".into())
            }),
            (false, Some(Claim::MemberLimit)) => Ok(Claim::MemberLimit),
            (false, Some(_)) => Ok(Claim::NothingClaimable),
            (false, None) => Ok(Claim::PassUsed),
        })
        .collect::<Result<Vec<_>>>()?;
    metrics::histogram!("order_claim_flush_seconds").record(start.elapsed().as_secs_f64());
    Ok(answers)
}

/// The flush's statement over claims with distinct passes; one outcome per claim, in
/// order. It runs alone, without BEGIN and COMMIT (two round trips fewer): a statement
/// is atomic by itself, and its one check that the tables could break (every inserted
/// reservation moved its unit) is made inside it, failing it whole, so a failed flush
/// has written nothing and holds no unit lock by the time its claims fall back alone.
async fn claim_distinct(pool: &PgPool, claims: &[&NewClaim]) -> Result<Vec<Claim>> {
    let mut conn = pool.acquire().await?;
    let outcome = claim_in(&mut conn, claims).await;
    if outcome.is_err() {
        error::settle(&mut conn).await;
    }
    outcome
}

async fn claim_in(conn: &mut PgConnection, claims: &[&NewClaim]) -> Result<Vec<Claim>> {
    // Reservation ids are made here, as the single claim makes its own, so an answer is
    // matched to its request by id as well as by position.
    let ids: Vec<Uuid> = claims.iter().map(|_| Uuid::now_v7()).collect();
    let rows = sqlx::query(
        r#"
        WITH req AS MATERIALIZED (
            SELECT r.id, r.product_id, r.member_id, r.pass_id, r.ttl, r.cap, r.ord
            FROM UNNEST($1::UUID[], $2::BIGINT[], $3::TEXT[], $4::UUID[], $5::FLOAT8[], $6::BIGINT[])
                 WITH ORDINALITY AS r (id, product_id, member_id, pass_id, ttl, cap, ord)
        ), classified AS MATERIALIZED (
            -- Each lookup is a LATERAL probe with a LIMIT, so that it stays one index
            -- probe per request on any plan: as plain subqueries, the generic plan made
            -- while the table was small hashed every pass in the table and intersected
            -- bitmaps of every live reservation, a cost growing with the drop.
            SELECT r.id, r.product_id, r.member_id, r.pass_id, r.ttl, r.cap, r.ord,
                   pu.pass_id IS NOT NULL AS pass_used,
                   h.held,
                   row_number() OVER (PARTITION BY r.product_id, r.member_id ORDER BY r.ord) AS m
            FROM req r
            LEFT JOIN LATERAL (
                SELECT x.pass_id FROM reservations x WHERE x.pass_id = r.pass_id LIMIT 1
            ) pu ON TRUE
            -- Counted up to the cap only: that is all the comparison needs. Read along the
            -- member's own reservations, in the order of their index.
            CROSS JOIN LATERAL (
                SELECT COUNT(*) AS held
                FROM (
                    SELECT 1
                    FROM reservations x
                    WHERE x.member_id = r.member_id AND x.product_id = r.product_id
                      AND x.state IN ('RESERVED', 'CONFIRMED')
                    ORDER BY x.member_id, x.created_at
                    LIMIT r.cap
                ) y
            ) h
        ), fresh AS MATERIALIZED (
            SELECT c.id, c.product_id, c.member_id, c.pass_id, c.ttl, c.ord,
                   row_number() OVER (PARTITION BY c.product_id ORDER BY c.ord) AS k
            FROM classified c
            -- One claim per member and product per flush, and only under the cap.
            WHERE NOT c.pass_used AND c.m = 1 AND c.held < c.cap
        ), wanted AS (
            SELECT f.product_id, COUNT(*) AS n
            FROM fresh f
            GROUP BY f.product_id
        ), locked AS MATERIALIZED (
            SELECT u.id, u.product_id
            FROM wanted w
            CROSS JOIN LATERAL (
                SELECT s.id, s.product_id
                FROM product_stock s
                WHERE s.product_id = w.product_id AND s.state = 'AVAILABLE'
                ORDER BY s.id
                LIMIT w.n
                FOR UPDATE SKIP LOCKED
            ) u
        ), units AS MATERIALIZED (
            SELECT l.id, l.product_id, row_number() OVER (PARTITION BY l.product_id ORDER BY l.id) AS k
            FROM locked l
        ), inserted AS (
            INSERT INTO reservations (id, product_id, unit_id, member_id, pass_id, price, state, expires_at)
            SELECT f.id, f.product_id, u.id, f.member_id, f.pass_id, p.price, 'RESERVED',
                   now() + make_interval(secs => f.ttl)
            FROM fresh f
            JOIN units u ON u.product_id = f.product_id AND u.k = f.k
            JOIN products p ON p.id = f.product_id
            ORDER BY f.pass_id
            ON CONFLICT ON CONSTRAINT reservations_pass_id_unique DO NOTHING
            RETURNING id, product_id, member_id, unit_id, price, state, expires_at, order_id, created_at, updated_at
        ), claimed AS (
            UPDATE product_stock s
            SET state = 'RESERVED', updated_at = now()
            FROM inserted i
            -- By primary key alone: naming the product too let the plan walk the
            -- product's (product_id, state) index instead.
            WHERE s.id = i.unit_id AND s.state = 'AVAILABLE'
            RETURNING s.id
        ), counted AS (
            SELECT (SELECT COUNT(*) FROM claimed) AS units_claimed,
                   (SELECT COUNT(*) FROM inserted) AS created
        ), tally AS MATERIALIZED (
            SELECT t.units_claimed,
                   CASE WHEN t.units_claimed = t.created THEN 0
                        ELSE CAST('order claim flush invariant breach: ' || t.created
                                  || ' reservations but ' || t.units_claimed || ' units moved'
                                  AS INTEGER)
                   END AS breach
            FROM counted t
        )
        SELECT r.ord, t.breach,
               CASE WHEN i.id IS NOT NULL THEN 'CREATED'
                    WHEN r.pass_used THEN 'PASS_USED'
                    WHEN r.held >= r.cap THEN 'LIMIT'
                    -- A second claim of one member in the flush: over the limit if the
                    -- first made a reservation, else nothing was claimable for either.
                    WHEN r.m > 1 THEN CASE WHEN EXISTS (
                             SELECT 1 FROM inserted i2
                             WHERE i2.product_id = r.product_id AND i2.member_id = r.member_id)
                         THEN 'LIMIT' ELSE 'NOTHING' END
                    WHEN u.id IS NOT NULL THEN 'PASS_USED'
                    ELSE 'NOTHING' END AS outcome,
               t.units_claimed,
               i.id, i.product_id, i.member_id, i.unit_id, i.price, i.state, i.expires_at,
               i.order_id, i.created_at, i.updated_at
        FROM classified r
        CROSS JOIN tally t
        LEFT JOIN fresh f ON f.ord = r.ord
        LEFT JOIN units u ON u.product_id = f.product_id AND u.k = f.k
        LEFT JOIN inserted i ON i.id = r.id
        ORDER BY r.ord
        "#,
    )
    .bind(&ids)
    .bind(claims.iter().map(|c| c.product_id).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.member.as_str()).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.pass_id).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.ttl.as_secs_f64()).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.cap).collect::<Vec<_>>())
    .fetch_all(&mut *conn)
    .await
    .map_err(error::from_statement)?;

    // The statement yields one row per request by construction (each join is on a
    // key); these checks guard against a wrong edit of it. They come after the commit,
    // but a claim answered with an error falls back alone and, finding its pass used,
    // is answered its reservation, so nothing is lost.
    if rows.len() != claims.len() {
        return Err(Error::Invariant(format!(
            "claim flush: {} rows for {} claims",
            rows.len(),
            claims.len()
        )));
    }
    let mut outcomes = Vec::with_capacity(rows.len());
    let mut created = 0_i64;
    let mut units_claimed = 0_i64;
    for (at, row) in rows.iter().enumerate() {
        let ord: i64 = row.try_get("ord")?;
        if usize::try_from(ord).ok() != Some(at + 1) {
            return Err(Error::Invariant(format!(
                "claim flush: row {ord} in place {}",
                at + 1
            )));
        }
        units_claimed = row.try_get("units_claimed")?;
        let outcome: &str = row.try_get("outcome")?;
        outcomes.push(match outcome {
            "CREATED" => {
                let r = Reservation::try_from(ReservationRow::from_row(row)?)?;
                if r.id != ids[at] {
                    return Err(Error::Invariant(format!(
                        "claim flush: reservation {} answered for request {}",
                        r.id, ids[at]
                    )));
                }
                created += 1;
                Claim::Created(r)
            }
            "PASS_USED" => Claim::PassUsed,
            "LIMIT" => Claim::MemberLimit,
            _ => Claim::NothingClaimable,
        });
    }
    // Checked in the statement already (it fails otherwise); kept as the same guard.
    if units_claimed != created {
        return Err(Error::Invariant(format!(
            "claim flush: {created} reservations but {units_claimed} units moved"
        )));
    }
    Ok(outcomes)
}
