//! The deposit rule: money paid into a member account from outside (an operator's
//! top-up), once per operation key. The merchant is not involved: like an opening, a
//! deposit adds money to the system, and the ledger explains it.

use sqlx::PgPool;

use crate::{
    api::DepositRequest,
    error::{Result, Rule},
    ledger::{self, Answer, Met},
};

/// One statement, in the lock order of [`crate::ledger`]: `held` (keys that already
/// hold a row), `locked` (the other deposits' member accounts, by id), `inserted` (in
/// key order; a key a concurrent statement holds is waited for and skipped), `moved`
/// (each account raised by the sum of its inserted deposits), `tally` (every account
/// moved to exactly its locked balance plus its deposits, else the statement fails
/// whole). Answers one row per deposit, in order.
const STATEMENT: &str = concat!(
    ledger::fresh!(
        "$1::UUID[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[]",
        "id, operation_key, account_id, amount"
    ),
    ledger::locked_members!("f.account_id FROM fresh f"),
    r#"
inserted AS (
    INSERT INTO transactions (id, operation_key, kind, status, account_id, amount)
    SELECT f.id, f.operation_key, 'DEPOSIT', 'APPLIED', f.account_id, f.amount"#,
    ledger::insert_once!("fresh f", "f"),
    ledger::raised!(),
    ledger::accounts_tally!("deposit", "balance <> expected"),
    ledger::answered!()
);

/// Applies `deposits` (distinct keys) in one statement and answers each as
/// `POST /v1/deposits` would.
#[tracing::instrument(skip_all, fields(deposits = deposits.len()))]
pub(crate) async fn apply(pool: &PgPool, deposits: &[DepositRequest]) -> Result<Vec<Answer>> {
    let rows = ledger::run(pool, STATEMENT, deposits, |q| ledger::money(q, deposits)).await?;
    let met = Met::read_all(&rows, Rule::Deposit)?;
    ledger::answer(pool, deposits, met, ledger::created, |_| None).await
}

impl ledger::Statement for DepositRequest {
    fn apply<'a>(pool: &'a PgPool, reqs: &'a [Self]) -> ledger::Applying<'a, Self::Record> {
        Box::pin(apply(pool, reqs))
    }
}
