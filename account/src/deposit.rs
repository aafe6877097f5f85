//! The deposit rule: money paid into a member account from outside (a staff top-up),
//! once per operation key, and only as the orchestrator's signed authorization grants
//! it (checked by the handler before it gets here): the row names who asked and who
//! approved. The merchant is not involved: like an opening, a deposit adds money to the
//! system, and the ledger explains it.

use paysaga_common::{deposits::DepositGrant, money::Amount};
use sqlx::PgPool;

use crate::{
    api::{DepositRequest, OperationKey},
    error::{Result, Rule},
    ledger::{self, Answer, Met},
};

/// A deposit whose authorization verified: what the ledger writes.
#[derive(Debug, Clone)]
pub(crate) struct ApprovedDeposit {
    pub operation_key: OperationKey,
    pub account_id: i64,
    pub amount: Amount,
    /// The person who asked, as the authorization names them.
    pub requested_by: String,
    /// The second person who approved it, if the authorization names one.
    pub approved_by: Option<String>,
}

impl ApprovedDeposit {
    /// `req` as `grant` (verified against it) approves it.
    pub(crate) fn new(req: DepositRequest, grant: DepositGrant) -> Self {
        Self {
            operation_key: req.operation_key,
            account_id: req.account_id,
            amount: req.amount,
            requested_by: grant.requested_by,
            approved_by: grant.approved_by,
        }
    }
}

/// One statement, in the lock order of [`crate::ledger`]: `held` (keys that already
/// hold a row), `locked` (the other deposits' member accounts, by id), `inserted` (in
/// key order; a key a concurrent statement holds is waited for and skipped), `moved`
/// (each account with a deposit, among those locked: the ledger's trigger raises their
/// balances at the statement's end), `tally` (every account with a deposit was locked,
/// else the statement fails whole). Answers one row per deposit, in order.
const STATEMENT: &str = concat!(
    ledger::fresh!(
        "$1::UUID[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[], $5::TEXT[], $6::TEXT[]",
        "id, operation_key, account_id, amount, requested_by, approved_by"
    ),
    ledger::locked_members!("f.account_id FROM fresh f"),
    r#"
inserted AS (
    INSERT INTO transactions (id, operation_key, kind, status, account_id, amount,
                              requested_by, approved_by)
    SELECT f.id, f.operation_key, 'DEPOSIT', 'APPLIED', f.account_id, f.amount,
           f.requested_by, f.approved_by"#,
    ledger::insert_once!("fresh f", "f"),
    ledger::moved_locked!(),
    ledger::accounts_tally!("deposit"),
    ledger::answered!()
);

/// Applies `deposits` (distinct keys) in one statement and answers each as
/// `POST /v1/deposits` would.
#[tracing::instrument(skip_all, fields(deposits = deposits.len()))]
pub(crate) async fn apply(pool: &PgPool, deposits: &[ApprovedDeposit]) -> Result<Vec<Answer>> {
    let rows = ledger::run(pool, STATEMENT, deposits, |q| {
        let requested: Vec<&str> = deposits.iter().map(|d| d.requested_by.as_str()).collect();
        let approved: Vec<Option<&str>> =
            deposits.iter().map(|d| d.approved_by.as_deref()).collect();
        ledger::money(q, deposits).bind(requested).bind(approved)
    })
    .await?;
    let met = Met::read_all(&rows, Rule::Deposit)?;
    ledger::answer(pool, deposits, met, ledger::created, |_| None).await
}

impl ledger::Statement for ApprovedDeposit {
    fn apply<'a>(pool: &'a PgPool, reqs: &'a [Self]) -> ledger::Applying<'a, Self::Record> {
        Box::pin(apply(pool, reqs))
    }
}
