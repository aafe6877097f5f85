//! The transfer rule: a member moves money from their account to another member's,
//! once per key, only if their available balance (balance minus what holds hold)
//! covers it. Both sides are written by one statement: `TRANSFER_OUT` on the sender's
//! account under the key, `TRANSFER_IN` on the recipient's, summing to zero. A transfer
//! the balance does not cover writes nothing (asking again is judged afresh, as a hold
//! is).

use std::collections::HashMap;

use paysaga_common::{auth::MemberId, money::Amount};
use sqlx::{postgres::PgRow, PgPool, Row};

use crate::{
    api::{AccountKind, OperationKey, Recipient, TransactionKind, Transfer},
    error::{Error, Result, Rule},
    ledger::{self, Answer, Met, Outcome, Request},
};

/// A member's transfer, as the rule takes it: the ledger key (the caller's
/// `Idempotency-Key` scoped to them, [`crate::api::TransferKey::operation_key`]), the
/// sender, and the body.
#[derive(Debug, Clone)]
pub(crate) struct TransferOrder {
    pub key: OperationKey,
    pub sender: MemberId,
    pub to: Recipient,
    pub amount: Amount,
}

/// What a transfer's key holds: the transfer, with the member whose account it paid.
/// A key holding another kind of row (a service's debit under such a key) is no
/// transfer: any transfer request meeting it reuses the key.
#[derive(Debug, Clone)]
pub(crate) struct TransferRecord {
    pub transfer: Transfer,
    pub to_owner: String,
    pub is_transfer: bool,
}

impl TransferRecord {
    /// Reads the columns of [`TRANSFER_COLUMNS`].
    fn read(row: &PgRow) -> Result<Self> {
        let kind: String = row.try_get("kind")?;
        Ok(TransferRecord {
            transfer: Transfer {
                id: row.try_get("id")?,
                from_account_id: row.try_get("from_account_id")?,
                to_account_id: row.try_get::<Option<i64>, _>("to_account_id")?.unwrap_or(0),
                amount: row.try_get("amount")?,
                created_at: row.try_get("created_at")?,
            },
            to_owner: row
                .try_get::<Option<String>, _>("to_owner")?
                .unwrap_or_default(),
            is_transfer: kind == TransactionKind::TransferOut.as_str(),
        })
    }
}

/// A sender's transfers are decided one after another, each against what the one
/// before left available; the same call again is the transfer as first answered.
impl Request for TransferOrder {
    const RULE: Rule = Rule::Transfer;
    type Record = TransferRecord;
    type Group = String;
    fn group(&self) -> String {
        self.sender.as_str().to_owned()
    }
    fn key(&self) -> &str {
        self.key.as_str()
    }
    fn again(&self, record: &TransferRecord) -> Outcome<TransferRecord> {
        let same_recipient = match &self.to {
            Recipient::MemberId(m) => record.to_owner == m.as_str(),
            Recipient::AccountId(id) => record.transfer.to_account_id == *id,
        };
        if !record.is_transfer || !same_recipient || record.transfer.amount != self.amount.minor() {
            return ledger::reused(self.key.as_str());
        }
        ledger::replayed(record)
    }
}

/// The columns a key's row is answered with, from `transactions` aliased `t` and the
/// recipient's account `c`: the statement's `held` step and the lookup by key alike.
macro_rules! transfer_columns {
    () => {
        "t.id, t.operation_key, t.kind, t.account_id AS from_account_id, \
         t.counter_account_id AS to_account_id, t.amount, t.created_at, c.member_id AS to_owner"
    };
}

const TRANSFER_COLUMNS: &str = transfer_columns!();

/// One statement, in the lock order of [`crate::ledger`]:
///
/// - `held`: the keys that already hold a row (as the statement's snapshot sees them):
///   answered from it, nothing locked for them.
/// - `parties`: each other transfer's sender (the member's first member account) and
///   recipient (the account named, or the member's first member account), read, not
///   locked.
/// - `locked`: both sides' accounts of every transfer between two members, together,
///   by id, `FOR NO KEY UPDATE`: two transfers between the same accounts, either way,
///   lock them in the same order, so they wait for each other and never deadlock.
/// - `decided`: the transfers the sender's locked available balance covers.
/// - `inserted`: their `TRANSFER_OUT` rows, in key order; a key a concurrent statement
///   holds is waited for and skipped. `mirrored`: a `TRANSFER_IN` row for each out row
///   inserted, and only for those, so a skipped key writes neither side.
/// - `moved`: each account and the balance the sum of its rows moves it to (a sender
///   less, a recipient more), from the balance it was locked at; the ledger's trigger
///   writes it at the statement's end (migration `balances_follow_ledger`).
/// - `tally`: every out row mirrored, every account locked and left no lower than what
///   its holds hold, else the statement fails whole; CHECK
///   `accounts_available_nonnegative` stands behind it.
///
/// Answers one row per transfer, in order: the row its key holds or it wrote, else the
/// parties and the sender's available balance, which say why nothing was written.
const STATEMENT: &str = concat!(
    r#"
WITH input AS (
    SELECT *
    FROM UNNEST($1::UUID[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[], $6::BIGINT[],
                $7::UUID[]) WITH ORDINALITY
         AS o (id, operation_key, sender, amount, to_member, to_account, in_id, ord)
),
held AS MATERIALIZED (
    SELECT o.ord, "#,
    transfer_columns!(),
    r#"
    FROM input o
    JOIN transactions t ON t.operation_key = o.operation_key AND t.operation_key IS NOT NULL
    LEFT JOIN accounts c ON c.id = t.counter_account_id
),
fresh AS (
    SELECT o.* FROM input o WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.ord = o.ord)
),
parties AS MATERIALIZED (
    SELECT f.ord, f.sender, s.id AS from_id, r.id AS to_id, r.member_id AS to_owner,
           r.member_id <> f.sender AS between_two
    FROM fresh f
    LEFT JOIN LATERAL (
        SELECT a.id FROM accounts a
        WHERE a.member_id = f.sender AND a.kind = 'MEMBER'
        ORDER BY a.id
        LIMIT 1
    ) s ON TRUE
    LEFT JOIN LATERAL (
        SELECT a.id, a.member_id FROM accounts a
        WHERE a.id = f.to_account AND a.kind = 'MEMBER'
        UNION ALL
        SELECT m.id, m.member_id
        FROM (SELECT a.id, a.member_id FROM accounts a
              WHERE f.to_account IS NULL AND a.member_id = f.to_member AND a.kind = 'MEMBER'
              ORDER BY a.id
              LIMIT 1) AS m
    ) r ON TRUE
),"#,
    // Both sides of a transfer together: two transfers between the same accounts, either
    // way, lock them in the same order.
    ledger::locked_members!(
        "p.from_id FROM parties p WHERE p.between_two
         UNION
         SELECT p.to_id FROM parties p WHERE p.between_two"
    ),
    r#"
decided AS MATERIALIZED (
    SELECT f.id, f.in_id, f.operation_key, p.from_id, p.to_id, f.amount
    FROM fresh f
    JOIN parties p ON p.ord = f.ord
    JOIN locked s ON s.id = p.from_id
    JOIN locked r ON r.id = p.to_id
    WHERE p.between_two AND f.amount <= s.balance - s.held
),
inserted AS (
    INSERT INTO transactions (id, operation_key, kind, status, account_id, amount, transfer_id,
                              counter_account_id)
    SELECT d.id, d.operation_key, 'TRANSFER_OUT', 'APPLIED', d.from_id, d.amount, d.id, d.to_id
    FROM decided d
    ORDER BY d.operation_key
    ON CONFLICT (operation_key) WHERE operation_key IS NOT NULL DO NOTHING
    RETURNING id, operation_key, kind, account_id AS from_account_id,
              counter_account_id AS to_account_id, amount, created_at
),
mirrored AS (
    INSERT INTO transactions (id, operation_key, kind, status, account_id, amount, transfer_id,
                              counter_account_id)
    SELECT d.in_id, NULL, 'TRANSFER_IN', 'APPLIED', i.to_account_id, i.amount, i.id,
           i.from_account_id
    FROM inserted i
    JOIN decided d ON d.id = i.id
    RETURNING account_id, amount
),
legs AS (
    SELECT i.from_account_id AS account_id, -i.amount AS delta FROM inserted i
    UNION ALL
    SELECT m.account_id, m.amount FROM mirrored m
),
moved AS (
    SELECT l.id, l.balance + t.net AS expected, l.held AS locked_held
    FROM (SELECT account_id, SUM(delta)::BIGINT AS net FROM legs GROUP BY account_id) AS t
    JOIN locked l ON l.id = t.account_id
),
"#,
    ledger::paired_tally!(
        "transfer",
        "inserted" = "mirrored",
        "legs",
        "expected < locked_held"
    ),
    ledger::answer_select!(
        "id",
        "operation_key",
        "kind",
        "from_account_id",
        "to_account_id",
        "amount",
        "created_at",
    ),
    r#",
       COALESCE(p.to_owner, h.to_owner) AS to_owner,
       CASE WHEN p.from_id IS NOT NULL THEN 'MEMBER' END AS account_kind,
       p.to_id, p.between_two, s.balance - s.held AS available,
       t.breach"#,
    ledger::answer_from!(),
    r#"LEFT JOIN held h ON h.ord = o.ord
LEFT JOIN parties p ON p.ord = o.ord
LEFT JOIN locked s ON s.id = p.from_id
ORDER BY o.ord
"#
);

/// Why nothing was written for a transfer, from what the statement read of it.
struct Parties {
    to_id: Option<i64>,
    between_two: Option<bool>,
    available: Option<i64>,
}

/// Applies `transfers` (distinct keys, at most one per sender) in one statement and
/// answers each as `POST /v1/transfers` would.
#[tracing::instrument(skip_all, fields(transfers = transfers.len()))]
pub(crate) async fn apply(
    pool: &PgPool,
    transfers: &[TransferOrder],
) -> Result<Vec<Answer<TransferRecord>>> {
    let in_ids: Vec<uuid::Uuid> = transfers.iter().map(|_| uuid::Uuid::now_v7()).collect();
    let senders: Vec<&str> = transfers.iter().map(|t| t.sender.as_str()).collect();
    let amounts: Vec<i64> = transfers.iter().map(|t| t.amount.minor()).collect();
    let to_members: Vec<Option<&str>> = transfers
        .iter()
        .map(|t| match &t.to {
            Recipient::MemberId(m) => Some(m.as_str()),
            Recipient::AccountId(_) => None,
        })
        .collect();
    let to_accounts: Vec<Option<i64>> = transfers
        .iter()
        .map(|t| match &t.to {
            Recipient::AccountId(id) => Some(*id),
            Recipient::MemberId(_) => None,
        })
        .collect();
    let rows = ledger::run(pool, STATEMENT, transfers, |q| {
        q.bind(senders.clone())
            .bind(amounts.clone())
            .bind(to_members.clone())
            .bind(to_accounts.clone())
            .bind(in_ids.clone())
    })
    .await?;
    let (met, parties, applied) =
        Met::read_all_with(&rows, Rule::Transfer, TransferRecord::read, |row| {
            Ok(Parties {
                to_id: row.try_get("to_id")?,
                between_two: row.try_get("between_two")?,
                available: row.try_get("available")?,
            })
        })?;
    count("applied", applied);
    ledger::answer_with(
        transfers,
        met,
        ledger::created,
        |keys| async move { by_keys(pool, &keys).await },
        |i, sender| Some(refusal(&transfers[i], sender, &parties[i])),
        |_| 0,
    )
    .await
}

/// Why `t` wrote nothing, in the order a caller can act on: no account of their own,
/// no such recipient, themselves, short of money.
fn refusal(t: &TransferOrder, sender: Option<AccountKind>, p: &Parties) -> Error {
    if sender.is_none() {
        return Error::NoAccount(t.sender.as_str().to_owned());
    }
    if p.to_id.is_none() {
        return match &t.to {
            Recipient::AccountId(id) => Error::AccountNotFound(*id),
            Recipient::MemberId(m) => Error::NoAccount(m.as_str().to_owned()),
        };
    }
    if p.between_two != Some(true) {
        return Error::TransferToSelf;
    }
    let available = p.available.unwrap_or(0);
    if available >= t.amount.minor() {
        // Covered, yet not written: a concurrent transfer under the same key that then
        // rolled back made this one skip it. Nothing was done.
        return Error::Unavailable;
    }
    count("insufficient_funds", 1);
    Error::NotCovered {
        available,
        amount: t.amount.minor(),
    }
}

fn count(outcome: &'static str, n: usize) {
    if n > 0 {
        metrics::counter!("account_transfers_total", "outcome" => outcome).increment(n as u64);
    }
}

/// What the keys hold, as a transfer's key is answered.
async fn by_keys(pool: &PgPool, keys: &[String]) -> Result<HashMap<String, TransferRecord>> {
    let rows = sqlx::query(&format!(
        r#"SELECT {TRANSFER_COLUMNS}
           FROM transactions t
           LEFT JOIN accounts c ON c.id = t.counter_account_id
           WHERE t.operation_key = ANY($1) AND t.operation_key IS NOT NULL"#
    ))
    .bind(keys)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            let key: String = row.try_get("operation_key")?;
            Ok((key, TransferRecord::read(row)?))
        })
        .collect()
}

impl ledger::Statement for TransferOrder {
    fn apply<'a>(pool: &'a PgPool, reqs: &'a [Self]) -> ledger::Applying<'a, Self::Record> {
        Box::pin(apply(pool, reqs))
    }
}
