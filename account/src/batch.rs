//! `POST /v1/batch` and the single endpoints alike: operations split by kind, each kind
//! run through its rule's statement in as few rounds as batch order allows, answered
//! in order. A lone operation is a batch of one.
//!
//! Debits go first, then credits, then releases, then holds, then reads, so a read sees
//! what the batch did and a release frees money before a hold asks for it. Every
//! operation gets the answer its own endpoint would give.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    future::Future,
};

use paysaga_contracts::batch::{Reply, MAX_OPS};
use sqlx::PgPool;

use serde::Serialize;

use crate::{
    accounts,
    api::{AccountOp, DebitRequest, OperationKey},
    debit,
    error::{Breach, Error, Result},
    holds,
    ledger::{self, Answer, Outcome, Recorded, Request, Statement},
    shard::merchant_shard,
};

/// Answers `ops` in order. `Err` concerns the whole batch: it was refused and nothing
/// was applied, or a statement failed (it rolled back whole; the rounds before it, if
/// any, committed), and the caller asks by key as after a lost answer.
pub async fn answer(pool: &PgPool, shards: u16, ops: Vec<AccountOp>) -> Result<Vec<Reply>> {
    if ops.is_empty() || ops.len() > MAX_OPS {
        return Err(Error::BatchTooLarge {
            max: MAX_OPS,
            got: ops.len(),
        });
    }
    let mut replies: Vec<Option<Reply>> = vec![None; ops.len()];
    let mut debits = Vec::new();
    let mut credits = Vec::new();
    let mut releases = Vec::new();
    let mut placements = Vec::new();
    let mut account_reads = Vec::new();
    let mut key_reads = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            AccountOp::Debit(req) => debits.push((i, req)),
            AccountOp::Credit(req) => credits.push((i, req)),
            AccountOp::Release(req) => releases.push((i, req)),
            AccountOp::Hold(req) => placements.push((i, req)),
            AccountOp::Account { account_id } => account_reads.push((i, account_id)),
            // The single GET takes the key from its path and refuses a malformed one
            // with 400; the batch carries it as a plain string to answer the same.
            AccountOp::Transaction { operation_key } => match OperationKey::parse(operation_key) {
                Ok(key) => key_reads.push((i, key)),
                Err(why) => replies[i] = Some(refusal(Error::InvalidOperationKey(why))),
            },
        }
    }

    let moved = [
        self::debits(pool, shards, debits).await?,
        self::apply(pool, credits).await?,
    ];
    for (i, outcome) in moved.into_iter().flatten() {
        replies[i] = Some(reply_to(outcome));
    }
    let held = [
        self::apply(pool, releases).await?,
        self::apply(pool, placements).await?,
    ];
    for (i, outcome) in held.into_iter().flatten() {
        replies[i] = Some(reply_to(holds::public(outcome)));
    }
    if !account_reads.is_empty() {
        let ids: BTreeSet<i64> = account_reads.iter().map(|(_, id)| *id).collect();
        let found = accounts::by_ids(pool, &ids.into_iter().collect::<Vec<_>>()).await?;
        for (i, id) in account_reads {
            replies[i] = Some(match found.get(&id) {
                Some(account) => Reply::ok(200, account),
                None => refusal(Error::AccountNotFound(id)),
            });
        }
    }
    if !key_reads.is_empty() {
        let keys: BTreeSet<&str> = key_reads.iter().map(|(_, k)| k.as_str()).collect();
        let found = ledger::by_keys(pool, &keys.into_iter().collect::<Vec<_>>()).await?;
        for (i, key) in key_reads {
            replies[i] = Some(match found.get(key.as_str()) {
                Some(t) => Reply::ok(200, t),
                None => refusal(Error::TransactionNotFound(key.to_string())),
            });
        }
    }
    let sent = replies.len();
    let replies: Vec<Reply> = replies.into_iter().flatten().collect();
    if replies.len() != sent {
        return Err(Breach::Unreplied {
            sent,
            got: replies.len(),
        }
        .into());
    }
    Ok(replies)
}

/// The reply the operation's own endpoint would have sent.
fn reply_to<T: Serialize>(outcome: Outcome<T>) -> Reply {
    match outcome {
        Ok(r) => Reply::ok(if r.created { 201 } else { 200 }, &r.value),
        Err(e) => refusal(e),
    }
}

/// The reply of an operation its own endpoint would have refused with `e`.
fn refusal(e: Error) -> Reply {
    let (status, body) = e.into_reply();
    Reply::refused(status, &body)
}

/// The answer of a batch of one.
pub fn lone<T>(mut outcomes: Vec<(usize, Outcome<T>)>) -> Result<Recorded<T>> {
    match (outcomes.pop(), outcomes.is_empty()) {
        (Some((_, outcome)), true) => outcome,
        (last, _) => Err(Breach::Unreplied {
            sent: 1,
            got: outcomes.len() + usize::from(last.is_some()),
        }
        .into()),
    }
}

/// One request of a rule, applied as a batch of one: how its own endpoint answers it.
pub(crate) async fn one<R: Statement>(pool: &PgPool, req: R) -> Result<Recorded<R::Record>> {
    lone(apply(pool, vec![(0, req)]).await?)
}

/// Debits `ops`, the whole batch into one merchant shard: one row lock and one update
/// instead of one per key, and two concurrent batches meet on a shard 1 time in 16
/// rather than almost always. The shard is picked by the first key and recorded on
/// every applied row, which is where refunds draw.
pub async fn debits(
    pool: &PgPool,
    shards: u16,
    ops: Vec<(usize, DebitRequest)>,
) -> Result<Vec<(usize, Outcome)>> {
    let Some((_, first)) = ops.first() else {
        return Ok(Vec::new());
    };
    let shard = merchant_shard(first.operation_key.as_str(), shards);
    in_rounds(ops, |round: Vec<DebitRequest>| async move {
        debit::apply(pool, shard, &round).await
    })
    .await
}

/// Applies `ops`, all of one rule, in as few rounds as batch order allows: one statement
/// of the rule's each.
pub(crate) async fn apply<R: Statement>(
    pool: &PgPool,
    ops: Vec<(usize, R)>,
) -> Result<Vec<(usize, Outcome<R::Record>)>> {
    in_rounds(
        ops,
        |round: Vec<R>| async move { R::apply(pool, &round).await },
    )
    .await
}

/// Answers requests of one rule as the same calls made one after another, in batch
/// order, would be answered, in as few statements as that allows.
///
/// Each key's first occurrence takes part; they run as rounds, round k holding the
/// k-th request of each group (a debit's account, a refund's debit), so that a request
/// decided against what an earlier one of its group left sees it committed, and a
/// batch whose groups do not repeat is one statement. A repeated key is then judged
/// against what its key holds (a replay, a decline again, or a reuse), as if sent right
/// after; if the key still holds nothing (its first occurrence was refused), the
/// repeat runs in the next pass as a request of its own.
async fn in_rounds<R, F, Fut>(
    ops: Vec<(usize, R)>,
    mut run: F,
) -> Result<Vec<(usize, Outcome<R::Record>)>>
where
    R: Request,
    F: FnMut(Vec<R>) -> Fut,
    Fut: Future<Output = Result<Vec<Answer<R::Record>>>>,
{
    let mut outcomes = Vec::with_capacity(ops.len());
    let mut holds: HashMap<String, R::Record> = HashMap::new();
    let mut pending = ops;
    while !pending.is_empty() {
        let mut seen = HashSet::with_capacity(pending.len());
        let (firsts, repeats): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .partition(|(_, r)| seen.insert(r.key().to_owned()));
        for round in rounds(firsts) {
            let (indices, reqs): (Vec<usize>, Vec<R>) = round.into_iter().unzip();
            let keys: Vec<String> = reqs.iter().map(|r| r.key().to_owned()).collect();
            let answers = run(reqs).await?;
            Breach::all_answered(R::RULE, indices.len(), answers.len())?;
            for ((index, key), answer) in indices.into_iter().zip(keys).zip(answers) {
                if let Some(t) = answer.holds {
                    holds.insert(key, t);
                }
                outcomes.push((index, answer.outcome));
            }
        }
        pending = Vec::new();
        for (index, req) in repeats {
            match holds.get(req.key()) {
                Some(t) => outcomes.push((index, req.again(t))),
                None => pending.push((index, req)),
            }
        }
    }
    Ok(outcomes)
}

/// Round k: the k-th request of each group, in batch order.
fn rounds<R: Request>(ops: Vec<(usize, R)>) -> Vec<Vec<(usize, R)>> {
    let mut depth: HashMap<R::Group, usize> = HashMap::with_capacity(ops.len());
    let mut rounds: Vec<Vec<(usize, R)>> = Vec::new();
    for (index, req) in ops {
        let d = depth.entry(req.group()).or_insert(0);
        if rounds.len() <= *d {
            rounds.push(Vec::new());
        }
        rounds[*d].push((index, req));
        *d += 1;
    }
    rounds
}
