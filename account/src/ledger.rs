//! What the money rules (`debit`, `credit`, `deposit`, `transfer`; `hold` and `release`
//! for what they share with them) have in common: the by-key lookup, the rows their statements
//! answer with, and the answer a request gets from them (recorded, replayed, declined
//! again, key reused, or refused).
//!
//! Each rule is one statement in autocommit: no `BEGIN`/`COMMIT`, one round trip, all
//! of it or none of it. Every statement takes its row locks in one global order:
//!
//! 1. refunded debit rows, by operation key (credits only), and holds, by operation key
//!    (a debit that captures one, a release);
//! 2. member accounts, by id;
//! 3. operation keys, sorted (the insert of the new ledger rows or holds; a key another
//!    open statement has just inserted makes this one wait for it, then skip it);
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
        AccountKind, CreditRequest, DebitRequest, Transaction, TransactionKind, TransactionStatus,
    },
    deposit::ApprovedDeposit,
    error::{Breach, Error, Result, Rule},
    rows::TransactionRow,
};

/// What a request's key holds (a transaction, a hold) and whether this request created
/// it (`false`: a replay).
#[derive(Debug)]
pub struct Recorded<T = Transaction> {
    pub value: T,
    pub created: bool,
}

impl<T> Recorded<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Recorded<U> {
        Recorded {
            value: f(self.value),
            created: self.created,
        }
    }
}

/// What a request of a rule is answered.
pub type Outcome<T = Transaction> = Result<Recorded<T>>;

/// A request of one of the rules, under its operation key: what the batch's rounds need
/// to know of it.
pub(crate) trait Request: Clone {
    const RULE: Rule;
    /// What the rule records under a key.
    type Record: Clone;
    /// Requests the rule decides one after another, against what the one before left
    /// (a debit's account, a refund's debit, a hold's member): at most one of a group per
    /// statement.
    type Group: Eq + std::hash::Hash;
    fn group(&self) -> Self::Group;
    fn key(&self) -> &str;
    /// The answer to this request when its key already holds `record`: the same
    /// request again (a replay, or a refusal on record), or a reuse of the key.
    fn again(&self, record: &Self::Record) -> Outcome<Self::Record>;
}

/// A rule whose one statement applies requests of distinct keys (every rule but the
/// debit, whose statement also takes the batch's merchant shard).
pub(crate) trait Statement: Request {
    /// Applies `reqs` in one statement and answers each, in order.
    fn apply<'a>(pool: &'a PgPool, reqs: &'a [Self]) -> Applying<'a, Self::Record>;
}

/// What [`Statement::apply`] returns: the answers, once the statement has run.
pub(crate) type Applying<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<Answer<T>>>> + Send + 'a>>;

/// A request of one of the money rules, recorded as a ledger transaction.
pub(crate) trait Keyed: Request<Record = Transaction> {
    fn account_id(&self) -> i64;
    /// The amount moved, in minor units.
    fn amount(&self) -> i64;
    /// The kind of transaction the rule records.
    const KIND: TransactionKind;
    /// The debit a refund is of (credits only).
    fn refund_of(&self) -> Option<&str> {
        None
    }
    /// The hold a debit captures (debits only).
    fn hold_key(&self) -> Option<&str> {
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
            && t.hold_key.as_deref() == self.hold_key()
    }
}

/// The [`Request`] side of a money rule: its key, its group, and a repeat answered from
/// the transaction its key holds.
macro_rules! ledger_request {
    ($ty:ty, $rule:expr, $group:ty, |$r:ident| $grouped:expr) => {
        impl Request for $ty {
            const RULE: Rule = $rule;
            type Record = Transaction;
            type Group = $group;
            fn group(&self) -> $group {
                let $r = self;
                $grouped
            }
            fn key(&self) -> &str {
                self.operation_key.as_str()
            }
            fn again(&self, t: &Transaction) -> Outcome {
                answer_existing(t.clone(), self.is_request_of(t))
            }
        }
    };
}

ledger_request!(DebitRequest, Rule::Debit, i64, |r| r.account_id);
ledger_request!(CreditRequest, Rule::Credit, String, |r| r
    .refund_of
    .as_str()
    .to_owned());
// A deposit always applies: no deposit is decided against another.
ledger_request!(ApprovedDeposit, Rule::Deposit, String, |r| r
    .operation_key
    .as_str()
    .to_owned());

/// The fields every money rule's request carries, read alike.
macro_rules! request_fields {
    () => {
        fn account_id(&self) -> i64 {
            self.account_id
        }
        fn amount(&self) -> i64 {
            self.amount.minor()
        }
    };
}

impl Keyed for DebitRequest {
    request_fields!();
    const KIND: TransactionKind = TransactionKind::Debit;
    fn hold_key(&self) -> Option<&str> {
        self.hold_key.as_ref().map(|k| k.as_str())
    }
}

impl Keyed for CreditRequest {
    request_fields!();
    const KIND: TransactionKind = TransactionKind::Credit;
    fn refund_of(&self) -> Option<&str> {
        Some(self.refund_of.as_str())
    }
}

impl Keyed for ApprovedDeposit {
    request_fields!();
    const KIND: TransactionKind = TransactionKind::Deposit;
}

/// What a rule's statement met for one request, read from the columns every rule's
/// statement answers with (`ord, created, id`, the record's own columns, and
/// `account_kind`).
pub(crate) enum Met<T = Transaction> {
    /// This statement recorded it.
    Recorded(T),
    /// The key held this before the statement began.
    Held(T),
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
           t.refund_of, t.hold_key, t.declined_for, t.created_at
    FROM input o
    JOIN transactions t ON t.operation_key = o.operation_key AND t.operation_key IS NOT NULL
),
"#
    };
}
pub(crate) use held;

/// `input`, every statement's first table: the request arrays `$arrays` side by side
/// as the columns `$columns`, each row with its 1-based `ord`.
macro_rules! input {
    ($arrays:literal, $columns:literal) => {
        concat!(
            r#"
WITH input AS (
    SELECT *
    FROM UNNEST("#,
            $arrays,
            r#") WITH ORDINALITY
         AS o ("#,
            $columns,
            r#", ord)
),
"#
        )
    };
}
pub(crate) use input;

/// How a ledger rule's statement opens: [`input`] (`$arrays` as `$columns`), [`held`],
/// then `fresh`, the requests whose key holds no row yet.
macro_rules! fresh {
    ($arrays:literal, $columns:literal) => {
        concat!(
            $crate::ledger::input!($arrays, $columns),
            $crate::ledger::held!(),
            r#"
fresh AS (
    SELECT o.* FROM input o WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.ord = o.ord)
),
"#
        )
    };
}
pub(crate) use fresh;

/// `tally`: each account `inserted` names moved once (`moved`), and none of them off
/// (`$off`, what an account moved wrongly shows, when the rule's own update can go
/// wrong), else the breach rule `$rule`'s statement fails with (see
/// [`crate::error::BREACH_MARK`]).
macro_rules! accounts_tally {
    ($rule:literal) => {
        $crate::ledger::accounts_tally!($rule, "FALSE")
    };
    ($rule:literal, $off:literal) => {
        concat!(
            r#"
tally AS MATERIALIZED (
    SELECT CASE WHEN c.moved = c.accounts AND c.off IS NULL THEN 0
                ELSE CAST('account invariant breach;"#,
            $rule,
            r#";accounts=' || c.accounts
                          || ';moved=' || c.moved || ';account=' || COALESCE(c.off, 0) AS INTEGER)
           END AS breach
    FROM (SELECT (SELECT COUNT(DISTINCT account_id) FROM inserted) AS accounts,
                 (SELECT COUNT(*) FROM moved) AS moved,
                 (SELECT MIN(id) FROM moved WHERE "#,
            $off,
            r#") AS off) AS c
)
"#
        )
    };
}
pub(crate) use accounts_tally;

/// `tally` of a statement whose rows `$second` are written one for one with `$first`:
/// both counted and equal, each account `$accounts` names moved once (`moved`), and none
/// of them off (`$off`), else the breach rule `$rule`'s statement fails with (see
/// [`crate::error::BREACH_MARK`]). Its counts are columns beside `breach`.
macro_rules! paired_tally {
    ($rule:literal, $first:literal = $second:literal, $accounts:literal, $off:literal) => {
        concat!(
            r#"
tally AS MATERIALIZED (
    SELECT c.*,
           CASE WHEN c."#,
            $second,
            " = c.",
            $first,
            r#" AND c.moved = c.accounts AND c.off IS NULL THEN 0
                ELSE CAST('account invariant breach;"#,
            $rule,
            ";",
            $first,
            "=' || c.",
            $first,
            r#"
                          || ';"#,
            $second,
            "=' || c.",
            $second,
            r#" || ';accounts=' || c.accounts
                          || ';moved=' || c.moved || ';account=' || COALESCE(c.off, 0) AS INTEGER)
           END AS breach
    FROM (SELECT (SELECT COUNT(*) FROM "#,
            $first,
            ") AS ",
            $first,
            r#",
                 (SELECT COUNT(*) FROM "#,
            $second,
            ") AS ",
            $second,
            r#",
                 (SELECT COUNT(DISTINCT account_id) FROM "#,
            $accounts,
            r#") AS accounts,
                 (SELECT COUNT(*) FROM moved) AS moved,
                 (SELECT MIN(id) FROM moved WHERE "#,
            $off,
            r#") AS off) AS c
)
"#
        )
    };
}
pub(crate) use paired_tally;

/// `$name`: the rows of `$table` whose `$key` is among what `$keys` selects (and that
/// `$and` admits), locked `FOR NO KEY UPDATE` in `$key` order, the order every statement
/// takes a table's locks in, so two statements wait for each other and never deadlock.
macro_rules! lock_in_order {
    ($name:literal, $columns:literal, $table:literal, $key:literal, $keys:literal $(, $and:literal)?) => {
        concat!(
            "\n", $name, " AS MATERIALIZED (\n    SELECT ", $columns,
            "\n    FROM ", $table,
            "\n    WHERE ", $key, " = ANY(ARRAY(SELECT ", $keys, "))",
            $("\n      AND ", $and,)?
            "\n    ORDER BY ", $key,
            "\n    FOR NO KEY UPDATE\n),"
        )
    };
}
pub(crate) use lock_in_order;

/// `locked`: the member accounts `$source` names, by id, in the lock order, with the
/// balance and `held` a rule decides on.
macro_rules! locked_members {
    ($source:literal) => {
        $crate::ledger::lock_in_order!(
            "locked",
            "a.id, a.balance, a.held",
            "accounts a",
            "a.id",
            $source,
            "a.kind = 'MEMBER'"
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
    RETURNING id, operation_key, kind, status, account_id, amount, refund_of, hold_key,
              declined_for, created_at
),"#
        )
    };
}
pub(crate) use insert_once;

/// `moved`: each account the `inserted` rows name, among those the statement `locked`
/// (the ledger's trigger moves their balances at the statement's end, on rows it must
/// already hold: the tally counts them against the accounts named).
macro_rules! moved_locked {
    () => {
        r#"
moved AS (
    SELECT l.id
    FROM (SELECT DISTINCT account_id FROM inserted) AS t
    JOIN locked l ON l.id = t.account_id
),"#
    };
}
pub(crate) use moved_locked;

/// How a rule's statement answers each request: its `ord`, whether its row was
/// `created` now, and each of `$column` from `inserted` (`i`) or else `held` (`h`).
macro_rules! answer_select {
    ($($column:literal),+ $(,)?) => {
        concat!(
            "\nSELECT o.ord, i.id IS NOT NULL AS created"
            $(, ",\n       COALESCE(i.", $column, ", h.", $column, ") AS ", $column)+
        )
    };
}
pub(crate) use answer_select;

/// The columns every rule's statement answers each request with ([`Met::read`]), from
/// `inserted` or else `held`.
macro_rules! answer_columns {
    () => {
        concat!(
            $crate::ledger::answer_select!(
                "id",
                "operation_key",
                "kind",
                "status",
                "account_id",
                "amount",
                "refund_of",
                "hold_key",
                "declined_for",
                "created_at",
            ),
            ",\n       a.kind AS account_kind"
        )
    };
}
pub(crate) use answer_columns;

/// What every rule's answer reads from first, one row per request in `input`: the
/// `tally` (its `breach`) and the row the request `inserted`, if any.
macro_rules! answer_from {
    () => {
        r#"
FROM input o
CROSS JOIN tally t
LEFT JOIN inserted i ON i.operation_key = o.operation_key
"#
    };
}
pub(crate) use answer_from;

/// What [`answer_columns`] reads from: [`answer_from`], the row the key held, and the
/// account named.
macro_rules! answer_joins {
    () => {
        concat!(
            $crate::ledger::answer_from!(),
            r#"LEFT JOIN held h ON h.ord = o.ord
LEFT JOIN accounts a ON a.id = o.account_id AND a.id = ANY($3)
"#
        )
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
/// opens with (`$1` a fresh transaction id each, `$2` the keys), then those `more` binds;
/// again while PostgreSQL rolls it back as a conflict (it changed nothing), under the
/// same ids.
pub(crate) async fn run<'q, R: Request>(
    pool: &PgPool,
    statement: &'q str,
    requests: &'q [R],
    more: impl Fn(Bound<'q>) -> Bound<'q>,
) -> Result<Vec<PgRow>> {
    let ids: Vec<uuid::Uuid> = requests.iter().map(|_| uuid::Uuid::now_v7()).collect();
    let keys: Vec<&str> = requests.iter().map(Request::key).collect();
    rerun(pool, || {
        more(sqlx::query(statement).bind(ids.clone()).bind(keys.clone()))
    })
    .await
}

/// What a money rule's statement takes after the keys: `$3` the accounts and `$4` the
/// amounts of `requests`.
pub(crate) fn money<'q, R: Keyed>(q: Bound<'q>, requests: &'q [R]) -> Bound<'q> {
    let accounts: Vec<i64> = requests.iter().map(Keyed::account_id).collect();
    let amounts: Vec<i64> = requests.iter().map(Keyed::amount).collect();
    q.bind(accounts).bind(amounts)
}

/// Runs the statement `bound` makes, again while PostgreSQL rolls it back as a
/// conflict (it changed nothing).
pub(crate) async fn rerun<'q>(pool: &PgPool, bound: impl Fn() -> Bound<'q>) -> Result<Vec<PgRow>> {
    retry::on_conflict(Error::is_conflict, || async {
        bound().fetch_all(pool).await.map_err(Error::from)
    })
    .await
}

impl Met {
    /// Reads every answer row of a money rule's statement, in request order.
    pub(crate) fn read_all(rows: &[PgRow], rule: Rule) -> Result<Vec<Met>> {
        rows.iter()
            .enumerate()
            .map(|(i, row)| Met::read(row, rule, i))
            .collect()
    }

    /// Reads one answer row of a money rule's statement, checking that it answers
    /// request `index` (0-based).
    pub(crate) fn read(row: &PgRow, rule: Rule, index: usize) -> Result<Met> {
        Met::read_with(row, rule, index, transaction)
    }
}

/// The transaction an answer row carries.
pub(crate) fn transaction(row: &PgRow) -> Result<Transaction> {
    Ok(Transaction::from(TransactionRow::from_row(row)?))
}

impl<T> Met<T> {
    /// Reads one answer row, its record decoded by `record`, checking that it answers
    /// request `index` (0-based).
    pub(crate) fn read_with(
        row: &PgRow,
        rule: Rule,
        index: usize,
        record: impl Fn(&PgRow) -> Result<T>,
    ) -> Result<Met<T>> {
        let ord: i64 = row.try_get("ord")?;
        if usize::try_from(ord).ok() != Some(index + 1) {
            return Err(Breach::Misordered { rule, index, ord }.into());
        }
        if row.try_get::<Option<uuid::Uuid>, _>("id")?.is_some() {
            let t = record(row)?;
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

    /// Reads every answer row in request order as [`Met::read_with`] does, with what
    /// `beside` reads of the same row (what says why a request wrote nothing), and how
    /// many of the requests the statement recorded.
    pub(crate) fn read_all_with<B>(
        rows: &[PgRow],
        rule: Rule,
        record: impl Fn(&PgRow) -> Result<T>,
        beside: impl Fn(&PgRow) -> Result<B>,
    ) -> Result<(Vec<Met<T>>, Vec<B>, usize)> {
        let mut met = Vec::with_capacity(rows.len());
        let mut besides = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            met.push(Met::read_with(row, rule, i, &record)?);
            besides.push(beside(row)?);
        }
        let recorded = met.iter().filter(|m| matches!(m, Met::Recorded(_))).count();
        Ok((met, besides, recorded))
    }
}

/// A request's outcome, and what its key holds afterwards (for a repeat of the key).
pub(crate) struct Answer<T = Transaction> {
    pub outcome: Outcome<T>,
    pub holds: Option<T>,
}

impl<T: Clone> Answer<T> {
    pub(crate) fn existing<R: Request<Record = T>>(req: &R, t: T) -> Self {
        Answer {
            outcome: req.again(&t),
            holds: Some(t),
        }
    }
}

/// Each money request's answer from what its rule's statement met (see
/// [`answer_with`]): a member account's refusal is the rule's own, if it has one.
pub(crate) async fn answer<R: Keyed>(
    pool: &PgPool,
    reqs: &[R],
    met: Vec<Met>,
    recorded: impl Fn(Transaction) -> Outcome,
    mut refusal: impl FnMut(usize) -> Option<Error>,
) -> Result<Vec<Answer>> {
    answer_with(
        reqs,
        met,
        recorded,
        |keys| async move { by_keys(pool, &keys).await },
        |i, account| match account {
            None => Some(Error::AccountNotFound(reqs[i].account_id())),
            Some(AccountKind::Merchant) => Some(Error::AccountNotMember(reqs[i].account_id())),
            Some(AccountKind::Member) => refusal(i),
        },
        |i| reqs[i].account_id(),
    )
    .await
}

/// Each request's answer from what its rule's statement met.
///
/// `recorded` answers a record this statement wrote (a debit recorded `DECLINED` is a
/// refusal). A request that met nothing is explained after the statement, in this
/// order: the record its key holds now (`lookup`: a concurrent duplicate's, which
/// committed while this statement waited for it: a replay, a decline again, or a
/// reuse); else `refused`, from the account the request named (missing, the merchant, a
/// member's: the rule's own reason). A request with none of these was neither recorded
/// nor conflicted: a breach (`account` names the account it concerns).
pub(crate) async fn answer_with<R, Fut>(
    reqs: &[R],
    met: Vec<Met<R::Record>>,
    recorded: impl Fn(R::Record) -> Outcome<R::Record>,
    lookup: impl FnOnce(Vec<String>) -> Fut,
    mut refused_for: impl FnMut(usize, Option<AccountKind>) -> Option<Error>,
    account: impl Fn(usize) -> i64,
) -> Result<Vec<Answer<R::Record>>>
where
    R: Request,
    Fut: std::future::Future<Output = Result<HashMap<String, R::Record>>>,
{
    Breach::all_answered(R::RULE, reqs.len(), met.len())?;
    let mut answers: Vec<Option<Answer<R::Record>>> = Vec::with_capacity(reqs.len());
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
        let keys: Vec<String> = unexplained
            .iter()
            .map(|(i, _)| reqs[*i].key().to_owned())
            .collect();
        let found = lookup(keys).await?;
        for (i, kind) in unexplained {
            let req = &reqs[i];
            let outcome = match found.get(req.key()) {
                Some(t) => Answer::existing(req, t.clone()),
                None => match refused_for(i, kind) {
                    Some(e) => refused(e),
                    None => {
                        return Err(Breach::Unclaimed {
                            rule: R::RULE,
                            key: req.key().to_owned(),
                            account: account(i),
                        }
                        .into())
                    }
                },
            };
            answers[i] = Some(outcome);
        }
    }
    let answers: Vec<Answer<R::Record>> = answers.into_iter().flatten().collect();
    Breach::all_answered(R::RULE, reqs.len(), answers.len())?;
    Ok(answers)
}

fn refused<T>(e: Error) -> Answer<T> {
    Answer {
        outcome: Err(e),
        holds: None,
    }
}

/// What this request created.
pub(crate) fn created<T>(value: T) -> Outcome<T> {
    Ok(Recorded {
        value,
        created: true,
    })
}

/// The answer to a request whose key already holds `existing`: the same transaction
/// again (a declined one is declined again), or a refusal if the request differs.
pub(crate) fn answer_existing(existing: Transaction, same_request: bool) -> Outcome {
    if !same_request {
        return reused(&existing.operation_key);
    }
    if existing.status == TransactionStatus::Declined {
        metrics::counter!("account_replays_total", "outcome" => "replayed").increment(1);
        return Err(Error::Declined(Box::new(existing)));
    }
    replayed(&existing)
}

/// The same request again: what its key holds, not created now.
pub(crate) fn replayed<T: Clone>(record: &T) -> Outcome<T> {
    metrics::counter!("account_replays_total", "outcome" => "replayed").increment(1);
    Ok(Recorded {
        value: record.clone(),
        created: false,
    })
}

/// A different request under a key that already holds something.
pub(crate) fn reused<T>(key: &str) -> Outcome<T> {
    metrics::counter!("account_replays_total", "outcome" => "key_reused").increment(1);
    Err(Error::OperationKeyReused(key.to_owned()))
}

/// Looks a transaction up by operation key.
#[tracing::instrument(skip_all, fields(operation_key = key))]
pub async fn by_key(pool: &PgPool, key: &str) -> Result<Option<Transaction>> {
    let row: Option<TransactionRow> = sqlx::query_as(
        r#"SELECT id, operation_key, kind, status, account_id, amount, refund_of, hold_key,
                  declined_for, created_at
           FROM transactions
           WHERE operation_key = $1"#,
    )
    .bind(key)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Transaction::from))
}

/// Transactions by operation key, as `GET /v1/transactions/{key}` shows them.
pub async fn by_keys<K: AsRef<str>>(
    pool: &PgPool,
    keys: &[K],
) -> Result<HashMap<String, Transaction>> {
    let keys: Vec<&str> = keys.iter().map(AsRef::as_ref).collect();
    let rows: Vec<TransactionRow> = sqlx::query_as(
        r#"SELECT id, operation_key, kind, status, account_id, amount, refund_of, hold_key,
                  declined_for, created_at
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
