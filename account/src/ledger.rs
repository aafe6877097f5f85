//! What the three money rules (`debit`, `credit`, `deposit`) share: the by-key lookup,
//! the rows their statements answer with, and the answer a request gets from them
//! (recorded, replayed, declined again, key reused, or refused).
//!
//! Each rule is one statement in autocommit: no `BEGIN`/`COMMIT`, one round trip, all
//! of it or none of it. Every statement takes its row locks in one global order:
//!
//! 1. refunded debit rows, by operation key (credits only);
//! 2. member accounts, by id;
//! 3. operation keys, sorted (the insert of the new ledger rows; a key another open
//!    statement has just inserted makes this one wait for it, then skip it);
//! 4. merchant shards, by shard number (a debit round has one, a credit round locks
//!    those its debits paid into).
//!
//! A statement takes each step's locks only once the step before it is complete (an
//! `ARRAY(SELECT ...)` over the earlier step is evaluated whole before the step's scan
//! starts, and the insert sorts its rows first), and every later update touches only
//! rows it already holds. So two statements can wait on each other only in the order
//! above, never in a cycle. Rarely PostgreSQL still rolls one back as a deadlock
//! (waiters for a row queue on its heavyweight tuple lock); it changed nothing and is
//! run again (`retry::on_conflict`).

use std::collections::HashMap;

use paysaga_common::retry;
use sqlx::{
    postgres::{PgArguments, PgRow},
    query::Query,
    FromRow, PgPool, Postgres, Row,
};

use crate::{
    api::{
        AccountKind, CreditRequest, DebitRequest, DepositRequest, Transaction, TransactionKind,
        TransactionStatus,
    },
    error::{Breach, Error, Result, Rule},
    rows::TransactionRow,
};

/// A transaction and whether this request created it (`false`: a replay).
#[derive(Debug)]
pub struct Recorded {
    pub transaction: Transaction,
    pub created: bool,
}

/// What a request of a rule is answered.
pub type Outcome = Result<Recorded>;

/// A request of one of the rules, under its operation key.
pub(crate) trait Keyed: Clone {
    const RULE: Rule;
    /// Requests the rule decides one after another, against what the one before left
    /// (a debit's account, a refund's debit): at most one of a group per statement.
    type Group: Eq + std::hash::Hash;
    fn group(&self) -> Self::Group;
    fn key(&self) -> &str;
    fn account_id(&self) -> i64;
    /// The amount moved, in minor units.
    fn amount(&self) -> i64;
    /// The kind of transaction the rule records.
    const KIND: TransactionKind;
    /// The debit a refund is of (credits only).
    fn refund_of(&self) -> Option<&str> {
        None
    }
    /// Whether a stored transaction is this same request (a replay) or not (a reuse).
    fn is_request_of(&self, t: &Transaction) -> bool {
        t.kind == Self::KIND
            && t.account_id == self.account_id()
            && t.amount == self.amount()
            && match self.refund_of() {
                Some(debit) => t.refund_of.as_deref() == Some(debit),
                None => true,
            }
    }
}

/// The fields every rule's request carries, read alike.
macro_rules! request_fields {
    () => {
        fn key(&self) -> &str {
            self.operation_key.as_str()
        }
        fn account_id(&self) -> i64 {
            self.account_id
        }
        fn amount(&self) -> i64 {
            self.amount.minor()
        }
    };
}

impl Keyed for DebitRequest {
    const RULE: Rule = Rule::Debit;
    type Group = i64;
    fn group(&self) -> i64 {
        self.account_id
    }
    request_fields!();
    const KIND: TransactionKind = TransactionKind::Debit;
}

impl Keyed for CreditRequest {
    const RULE: Rule = Rule::Credit;
    type Group = String;
    fn group(&self) -> String {
        self.refund_of.as_str().to_owned()
    }
    request_fields!();
    const KIND: TransactionKind = TransactionKind::Credit;
    fn refund_of(&self) -> Option<&str> {
        Some(self.refund_of.as_str())
    }
}

impl Keyed for DepositRequest {
    const RULE: Rule = Rule::Deposit;
    /// A deposit always applies: no deposit is decided against another.
    type Group = String;
    fn group(&self) -> String {
        self.operation_key.as_str().to_owned()
    }
    request_fields!();
    const KIND: TransactionKind = TransactionKind::Deposit;
}

/// What a rule's statement met for one request, read from the columns every rule's
/// statement answers with (`ord, created, id, operation_key, kind, status, account_id,
/// amount, refund_of, created_at, account_kind`).
pub(crate) enum Met {
    /// This statement recorded it.
    Recorded(Transaction),
    /// The key held this before the statement began.
    Held(Transaction),
    /// Nothing recorded and nothing visible under the key: the kind of the account
    /// named (`None`: no such account).
    Nothing { account: Option<AccountKind> },
}

/// The `held` step of every rule's statement: the requests whose keys already hold a
/// row, answered from it.
macro_rules! held {
    () => {
        r#"
held AS MATERIALIZED (
    SELECT o.ord, t.id, t.operation_key, t.kind, t.status, t.account_id, t.amount,
           t.refund_of, t.created_at
    FROM input o
    JOIN transactions t ON t.operation_key = o.operation_key AND t.operation_key IS NOT NULL
),
"#
    };
}
pub(crate) use held;

/// The `input` every rule without a refund column opens with, then [`held`].
macro_rules! input_held {
    () => {
        concat!(
            r#"
WITH input AS (
    SELECT *
    FROM UNNEST($1::UUID[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[]) WITH ORDINALITY
         AS o (id, operation_key, account_id, amount, ord)
),
"#,
            $crate::ledger::held!()
        )
    };
}
pub(crate) use input_held;

/// `locked`: the member accounts `$source` names, by id, in the lock order.
macro_rules! locked_members {
    ($source:literal) => {
        concat!(
            r#"
locked AS MATERIALIZED (
    SELECT a.id, a.balance
    FROM accounts a
    WHERE a.id = ANY(ARRAY(SELECT "#,
            $source,
            r#")) AND a.kind = 'MEMBER'
    ORDER BY a.id
    FOR NO KEY UPDATE
),"#
        )
    };
}
pub(crate) use locked_members;

/// How `inserted` ends when it answers the common columns: the rows of `$from` (alias
/// `$alias`) whose account is locked, in key order, a key a concurrent statement holds
/// waited for and skipped.
macro_rules! insert_once {
    ($from:literal, $alias:literal) => {
        concat!(
            "
    FROM ",
            $from,
            "
    JOIN locked l ON l.id = ",
            $alias,
            ".account_id
    ORDER BY ",
            $alias,
            r#".operation_key
    ON CONFLICT (operation_key) WHERE operation_key IS NOT NULL DO NOTHING
    RETURNING id, operation_key, kind, status, account_id, amount, refund_of, created_at
),"#
        )
    };
}
pub(crate) use insert_once;

/// `moved`: each locked account raised by the sum of its `inserted` rows.
macro_rules! raised {
    () => {
        r#"
moved AS (
    UPDATE accounts a SET balance = a.balance + t.total
    FROM (SELECT account_id, SUM(amount)::BIGINT AS total FROM inserted GROUP BY account_id) AS t
    JOIN locked l ON l.id = t.account_id
    WHERE a.id = t.account_id
    RETURNING a.id, a.balance, l.balance + t.total AS expected
),"#
    };
}
pub(crate) use raised;

/// The columns every rule's statement answers each request with ([`Met::read`]), from
/// `inserted` or else `held`.
macro_rules! answer_columns {
    () => {
        r#"
SELECT o.ord, i.id IS NOT NULL AS created,
       COALESCE(i.id, h.id) AS id,
       COALESCE(i.operation_key, h.operation_key) AS operation_key,
       COALESCE(i.kind, h.kind) AS kind,
       COALESCE(i.status, h.status) AS status,
       COALESCE(i.account_id, h.account_id) AS account_id,
       COALESCE(i.amount, h.amount) AS amount,
       COALESCE(i.refund_of, h.refund_of) AS refund_of,
       COALESCE(i.created_at, h.created_at) AS created_at,
       a.kind AS account_kind"#
    };
}
pub(crate) use answer_columns;

/// What [`answer_columns`] reads from, one row per request in `input`.
macro_rules! answer_joins {
    () => {
        r#"
FROM input o
CROSS JOIN tally t
LEFT JOIN inserted i ON i.operation_key = o.operation_key
LEFT JOIN held h ON h.ord = o.ord
LEFT JOIN accounts a ON a.id = o.account_id AND a.id = ANY($3)
"#
    };
}
pub(crate) use answer_joins;

/// How a rule's statement without columns of its own ends: [`answer_columns`] with the
/// breach, from [`answer_joins`], one row per request in order.
macro_rules! answered {
    () => {
        concat!(
            $crate::ledger::answer_columns!(),
            ", t.breach\n",
            $crate::ledger::answer_joins!(),
            "\nORDER BY o.ord\n"
        )
    };
}
pub(crate) use answered;

/// A rule's statement with its parameters bound.
pub(crate) type Bound<'q> = Query<'q, Postgres, PgArguments>;

/// Runs a rule's `statement` over `requests` with the parameters every rule's statement
/// opens with (`$1` a fresh transaction id each, `$2` the keys, `$3` the accounts, `$4`
/// the amounts), then those `more` binds; again while PostgreSQL rolls it back as a
/// conflict (it changed nothing), under the same ids.
pub(crate) async fn run<'q, R: Keyed>(
    pool: &PgPool,
    statement: &'q str,
    requests: &'q [R],
    more: impl Fn(Bound<'q>) -> Bound<'q>,
) -> Result<Vec<PgRow>> {
    let ids: Vec<uuid::Uuid> = requests.iter().map(|_| uuid::Uuid::now_v7()).collect();
    let keys: Vec<&str> = requests.iter().map(Keyed::key).collect();
    let accounts: Vec<i64> = requests.iter().map(Keyed::account_id).collect();
    let amounts: Vec<i64> = requests.iter().map(Keyed::amount).collect();
    retry::on_conflict(Error::is_conflict, || async {
        let bound = sqlx::query(statement)
            .bind(ids.clone())
            .bind(keys.clone())
            .bind(accounts.clone())
            .bind(amounts.clone());
        more(bound).fetch_all(pool).await.map_err(Error::from)
    })
    .await
}

impl Met {
    /// Reads every answer row of a `rule`'s statement, in request order.
    pub(crate) fn read_all(rows: &[PgRow], rule: Rule) -> Result<Vec<Met>> {
        rows.iter()
            .enumerate()
            .map(|(i, row)| Met::read(row, rule, i))
            .collect()
    }

    /// Reads one answer row, checking that it answers request `index` (0-based).
    pub(crate) fn read(row: &PgRow, rule: Rule, index: usize) -> Result<Met> {
        let ord: i64 = row.try_get("ord")?;
        if usize::try_from(ord).ok() != Some(index + 1) {
            return Err(Breach::Misordered { rule, index, ord }.into());
        }
        if row.try_get::<Option<uuid::Uuid>, _>("id")?.is_some() {
            let t = Transaction::from(TransactionRow::from_row(row)?);
            return Ok(if row.try_get("created")? {
                Met::Recorded(t)
            } else {
                Met::Held(t)
            });
        }
        let account = row
            .try_get::<Option<String>, _>("account_kind")?
            .map(AccountKind::try_from)
            .transpose()
            .map_err(|e| sqlx::Error::ColumnDecode {
                index: "account_kind".into(),
                source: Box::new(e),
            })?;
        Ok(Met::Nothing { account })
    }
}

/// A request's outcome, and what its key holds afterwards (for a repeat of the key).
pub(crate) struct Answer {
    pub outcome: Outcome,
    pub holds: Option<Transaction>,
}

impl Answer {
    fn existing<R: Keyed>(req: &R, t: Transaction) -> Self {
        Answer {
            outcome: answer_existing(t.clone(), req.is_request_of(&t)),
            holds: Some(t),
        }
    }
}

/// Each request's answer from what its rule's statement met.
///
/// `recorded` answers a transaction this statement wrote (a debit recorded `DECLINED`
/// is a refusal). `refusal` is the rule's own reason for not recording a request on a
/// member account (a refund's), if it has one. A request that met nothing is explained
/// after the statement, in this order: the row its key holds now (a concurrent
/// duplicate's, which committed while this statement waited for it: a replay, a
/// decline again, or a reuse); else the account it named (missing, the merchant);
/// else the rule's refusal. A request with none of these was neither recorded nor
/// conflicted: a breach.
pub(crate) async fn answer<R: Keyed>(
    pool: &PgPool,
    reqs: &[R],
    met: Vec<Met>,
    recorded: impl Fn(Transaction) -> Outcome,
    mut refusal: impl FnMut(usize) -> Option<Error>,
) -> Result<Vec<Answer>> {
    if met.len() != reqs.len() {
        return Err(Breach::Unanswered {
            rule: R::RULE,
            sent: reqs.len(),
            got: met.len(),
        }
        .into());
    }
    let mut answers: Vec<Option<Answer>> = Vec::with_capacity(reqs.len());
    let mut unexplained: Vec<(usize, Option<AccountKind>)> = Vec::new();
    for (i, (req, met)) in reqs.iter().zip(met).enumerate() {
        answers.push(match met {
            Met::Recorded(t) => Some(Answer {
                outcome: recorded(t.clone()),
                holds: Some(t),
            }),
            Met::Held(t) => Some(Answer::existing(req, t)),
            Met::Nothing { account } => {
                unexplained.push((i, account));
                None
            }
        });
    }
    if !unexplained.is_empty() {
        let keys: Vec<&str> = unexplained.iter().map(|(i, _)| reqs[*i].key()).collect();
        let found = by_keys(pool, &keys).await?;
        for (i, account) in unexplained {
            let req = &reqs[i];
            let outcome = match (found.get(req.key()), account) {
                (Some(t), _) => Answer::existing(req, t.clone()),
                (None, None) => refused(Error::AccountNotFound(req.account_id())),
                (None, Some(AccountKind::Merchant)) => {
                    refused(Error::AccountNotMember(req.account_id()))
                }
                (None, Some(AccountKind::Member)) => match refusal(i) {
                    Some(e) => refused(e),
                    None => {
                        return Err(Breach::Unclaimed {
                            rule: R::RULE,
                            key: req.key().to_owned(),
                            account: req.account_id(),
                        }
                        .into())
                    }
                },
            };
            answers[i] = Some(outcome);
        }
    }
    let answers: Vec<Answer> = answers.into_iter().flatten().collect();
    if answers.len() != reqs.len() {
        return Err(Breach::Unanswered {
            rule: R::RULE,
            sent: reqs.len(),
            got: answers.len(),
        }
        .into());
    }
    Ok(answers)
}

fn refused(e: Error) -> Answer {
    Answer {
        outcome: Err(e),
        holds: None,
    }
}

/// A transaction this request created.
pub(crate) fn created(transaction: Transaction) -> Outcome {
    Ok(Recorded {
        transaction,
        created: true,
    })
}

/// The answer to a request whose key already holds `existing`: the same transaction
/// again (a declined one is declined again), or a refusal if the request differs.
pub(crate) fn answer_existing(existing: Transaction, same_request: bool) -> Outcome {
    if !same_request {
        metrics::counter!("account_replays_total", "outcome" => "key_reused").increment(1);
        return Err(Error::OperationKeyReused(existing.operation_key));
    }
    metrics::counter!("account_replays_total", "outcome" => "replayed").increment(1);
    if existing.status == TransactionStatus::Declined {
        return Err(Error::InsufficientFunds(Box::new(existing)));
    }
    Ok(Recorded {
        transaction: existing,
        created: false,
    })
}

/// Looks a transaction up by operation key.
#[tracing::instrument(skip_all, fields(operation_key = key))]
pub async fn by_key(pool: &PgPool, key: &str) -> Result<Option<Transaction>> {
    let row: Option<TransactionRow> = sqlx::query_as(
        r#"SELECT id, operation_key, kind, status, account_id, amount, refund_of, created_at
           FROM transactions
           WHERE operation_key = $1"#,
    )
    .bind(key)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Transaction::from))
}

/// Transactions by operation key, as `GET /v1/transactions/{key}` shows them.
pub async fn by_keys(pool: &PgPool, keys: &[&str]) -> Result<HashMap<String, Transaction>> {
    let rows: Vec<TransactionRow> = sqlx::query_as(
        r#"SELECT id, operation_key, kind, status, account_id, amount, refund_of, created_at
           FROM transactions
           WHERE operation_key = ANY($1) AND operation_key IS NOT NULL"#,
    )
    .bind(keys)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.operation_key.clone(), Transaction::from(r)))
        .collect())
}
