//! The operators' side of the saga: [`Operations`] lists payments, shows one with its
//! step log, resumes one and refunds one. The operator API's routes call it, and the
//! console reads and acts through it as its [`PaymentDesk`].
//!
//! Four eyes for money: a refund of a payment above `STAFF_FOUR_EYES_ABOVE` is not
//! carried out when asked for; it becomes a pending refund approval, which an admin
//! other than the one who asked approves (the refund is then carried out, through the
//! same [`Operations::refund`]) or rejects. Top-ups ([`Operations::top_up_as`], admins
//! only) likewise above `STAFF_TOP_UP_FOUR_EYES_ABOVE`: each deposit goes to the member
//! service with a deposit authorization this service signs, naming who asked and who
//! approved, which the account service checks before it writes anything.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use axum::http::StatusCode;
use paysaga_common::{
    client::CallError,
    deposits::{DepositGrant, DepositSigner},
    error::codes as common_codes,
    money::Amount,
    paging::next_cursor,
    ApiError,
};
use paysaga_console::{
    desk::Answer, Decision, DeskError, DropSeries, PaymentDesk, ProductPayments,
};
use paysaga_contracts::account::api::{OperationKey, Transaction};
use paysaga_contracts::member::api::TopUpRequest;
use paysaga_contracts::orchestrator::api::{
    page_limit, state_filter, ListPayments, PaymentAdmin, PaymentPage, PaymentTimeline,
};
use paysaga_contracts::staff::api::{
    codes as staff_codes, ApprovalDecided, ApprovalKind, ApprovalPage, ApprovalState,
    ListApprovals, RefundAnswer, TopUp, TopUpAnswer, MAX_TOP_UP_KEY_LEN,
};
use paysaga_contracts::MemberClient;
use paysaga_staff::{audit::Entry, Acting, AuditAction, StaffRole};
use uuid::Uuid;
use workflows::{request_refund, State};

use crate::{
    driver::Engine,
    error::{Breach, Error, Result},
    store::{self, approvals::ApprovalRow, PaymentRow},
};

/// The operators' actions on payments; cheap to clone.
#[derive(Clone)]
pub struct Operations {
    engine: Arc<Engine>,
    /// `RESPONSE_WAIT_MS`: how long a resume or refund waits for the payment to settle.
    response_wait: Duration,
    /// `STAFF_OPERATOR_REFUND_LIMIT`: the largest payment an operator may refund.
    operator_refund_limit: i64,
    /// `STAFF_FOUR_EYES_ABOVE`: a refund of a payment above it waits for a second person.
    four_eyes_above: i64,
    /// Top-ups: the member service, the deposit authorizations' signer and the limit.
    top_ups: Arc<TopUps>,
}

/// What top-ups need: where deposits go, what signs them, and above what they wait.
pub struct TopUps {
    /// The member service (`MEMBER_URL`); without it a top-up is 503
    /// `TOP_UP_UNAVAILABLE`.
    pub members: Option<MemberClient>,
    /// Signs each deposit's authorization with this service's own key.
    pub signer: DepositSigner,
    /// `STAFF_TOP_UP_FOUR_EYES_ABOVE`: a top-up above it waits for a second person.
    pub four_eyes_above: i64,
}

/// What a top-up request came to.
#[derive(Debug, Clone)]
pub enum TopUpDone {
    /// Deposited: the ledger's row (`created`: now, not a replay of the key).
    Deposited { deposit: Transaction, created: bool },
    /// Above `STAFF_TOP_UP_FOUR_EYES_ABOVE`: the approval awaiting a second person.
    AwaitingApproval(ApprovalRow),
}

impl TopUpDone {
    pub fn to_api(&self) -> TopUpAnswer {
        match self {
            TopUpDone::Deposited { deposit, .. } => TopUpAnswer::Deposited(deposit.clone()),
            TopUpDone::AwaitingApproval(a) => TopUpAnswer::AwaitingApproval(a.to_api()),
        }
    }
}

impl Left for TopUpDone {
    /// The deposit's key, or the approval and its state.
    fn left(&self) -> String {
        match self {
            TopUpDone::Deposited { deposit, .. } => format!("deposit {}", deposit.operation_key),
            TopUpDone::AwaitingApproval(a) => a.left(),
        }
    }
}

impl Left for Transaction {
    /// The deposit's key.
    fn left(&self) -> String {
        format!("deposit {}", self.operation_key)
    }
}

/// What a refund request came to.
#[derive(Debug, Clone)]
pub enum Refund {
    /// Carried out (or under way): the payment after waiting up to `RESPONSE_WAIT_MS`.
    Done(PaymentRow),
    /// Above `STAFF_FOUR_EYES_ABOVE`: the approval awaiting a second person.
    AwaitingApproval(ApprovalRow),
}

impl Refund {
    pub fn to_api(&self) -> RefundAnswer {
        match self {
            Refund::Done(row) => RefundAnswer::Refunded(row.to_admin()),
            Refund::AwaitingApproval(a) => RefundAnswer::AwaitingApproval(a.to_api()),
        }
    }
}

/// The approval state a decision leaves.
fn decided_state(decision: Decision) -> ApprovalState {
    match decision {
        Decision::Approve => ApprovalState::Approved,
        Decision::Reject => ApprovalState::Rejected,
    }
}

/// The audit trail's name for a decision on an approval of `kind`.
fn decision_action(kind: ApprovalKind, decision: Decision) -> AuditAction {
    match (kind, decision) {
        (ApprovalKind::Refund, Decision::Approve) => AuditAction::RefundApproved,
        (ApprovalKind::Refund, Decision::Reject) => AuditAction::RefundRejected,
        (ApprovalKind::TopUp, Decision::Approve) => AuditAction::TopUpApproved,
        (ApprovalKind::TopUp, Decision::Reject) => AuditAction::TopUpRejected,
    }
}

/// The deposit's operation key of a top-up's `key`: `topup:<key>`; 422
/// `INVALID_TOP_UP_KEY` unless 1-64 characters of `[A-Za-z0-9_.:-]`.
fn top_up_key(key: &str) -> Result<OperationKey> {
    let invalid = || {
        Error::from(ApiError::unprocessable(
            staff_codes::INVALID_TOP_UP_KEY,
            format!(
                "a top-up's key is 1-{MAX_TOP_UP_KEY_LEN} characters of [A-Za-z0-9_.:-], unique per top-up"
            ),
        ))
    };
    if key.is_empty() || key.len() > MAX_TOP_UP_KEY_LEN {
        return Err(invalid());
    }
    OperationKey::parse(format!("topup:{key}")).map_err(|_| invalid())
}

/// A top-up's reason: required, at most 500 characters (422 `REASON_INVALID`).
fn top_up_reason(raw: &str) -> Result<String> {
    let invalid = |why: &str| {
        Error::from(ApiError::unprocessable(
            staff_codes::REASON_INVALID,
            why.to_owned(),
        ))
    };
    paysaga_staff::accounts::reason(Some(raw))
        .map_err(|_| invalid("a reason is at most 500 characters, with no control characters but tabs and line breaks"))?
        .ok_or_else(|| invalid("a top-up needs a reason"))
}

/// The member service's answer to a top-up, as this service answers it: its refusal (a
/// 4xx with its code, `DEPOSIT_NOT_APPROVED` included) passed on, no answer 503
/// `TOP_UP_UNAVAILABLE` (asking again with the same key is safe).
fn top_up_call(e: CallError) -> Error {
    use paysaga_contracts::{account::api::codes as account, member::api::codes as member};
    /// The member service's definite refusals of a top-up, passed on as they are.
    const PASSED_ON: [&str; 7] = [
        member::MEMBER_NOT_FOUND,
        member::ACCOUNT_PENDING,
        account::DEPOSIT_NOT_APPROVED,
        account::OPERATION_KEY_REUSED,
        account::ACCOUNT_NOT_FOUND,
        account::ACCOUNT_NOT_MEMBER,
        account::AMOUNT_OUT_OF_RANGE,
    ];
    let passed_on = |status: u16, code: &str| {
        let status = StatusCode::from_u16(status).ok()?;
        let code = PASSED_ON.iter().find(|c| **c == code)?;
        status.is_client_error().then_some((status, *code))
    };
    match e {
        CallError::Rejected { status, ref body } if passed_on(status, &body.code).is_some() => {
            let (status, code) = passed_on(status, &body.code).expect("checked");
            ApiError::new(status, code, body.message.clone()).into()
        }
        other => {
            tracing::warn!(error = %other, "top-up: the member service gave no definite answer");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                staff_codes::TOP_UP_UNAVAILABLE,
                "the member service did not answer; nothing is known to have been deposited: ask again with the same key",
            )
            .into()
        }
    }
}

/// Whether a refund is carried out when asked for, or waits for a second person.
enum RefundGate {
    Now,
    /// The payment's amount, as the approval records it.
    FourEyes {
        amount: i64,
    },
}

/// What an audit row says a done action left.
trait Left {
    fn left(&self) -> String;
}

impl Left for PaymentRow {
    /// The payment's state.
    fn left(&self) -> String {
        self.state.to_string()
    }
}

impl Left for ApprovalRow {
    /// The approval and its state.
    fn left(&self) -> String {
        format!("approval {} {}", self.id, self.state)
    }
}

/// The step log's note for a person's action: what, by whom (their name), and why if
/// they said.
fn note(done: &str, by: &str, reason: Option<&str>) -> String {
    match reason {
        Some(r) => format!("{done} by {by}: {r}"),
        None => format!("{done} by {by}"),
    }
}

/// A 400 `INVALID_QUERY` for the list's query.
fn invalid_query(message: String) -> Error {
    ApiError::bad_request(common_codes::INVALID_QUERY, message).into()
}

impl Operations {
    /// `operator_refund_limit` and `four_eyes_above` from the staff settings
    /// (`STAFF_OPERATOR_REFUND_LIMIT`, `STAFF_FOUR_EYES_ABOVE`).
    pub fn new(
        engine: Arc<Engine>,
        response_wait: Duration,
        operator_refund_limit: i64,
        four_eyes_above: i64,
        top_ups: TopUps,
    ) -> Self {
        Self {
            engine,
            response_wait,
            operator_refund_limit,
            four_eyes_above,
            top_ups: Arc::new(top_ups),
        }
    }

    /// An admin's top-up of `req.member_id` by `req.amount`, keyed by `req.key`: at or
    /// below `STAFF_TOP_UP_FOUR_EYES_ABOVE` deposited at once (its authorization naming
    /// `by` as who asked); above, a pending approval a second admin must give (the same
    /// approval for the same key; an approved one whose deposit did not get through is
    /// deposited now). Its audit row: `TOP_UP` (deposited, refused or failed) or
    /// `TOP_UP_REQUESTED`, the member as target.
    #[tracing::instrument(skip_all, fields(member = %req.member_id, amount = req.amount.minor()))]
    pub async fn top_up_as(&self, by: &Acting, req: TopUp) -> Result<TopUpDone> {
        let reason = top_up_reason(&req.reason);
        let target = req.member_id.to_string();
        let reason_given = reason.as_ref().ok().cloned();
        let asked = match reason {
            Ok(reason) => self.top_up(by, &req, &reason).await,
            Err(e) => Err(e),
        };
        let action = match &asked {
            Ok(TopUpDone::AwaitingApproval(_)) => AuditAction::TopUpRequested,
            _ => AuditAction::TopUp,
        };
        self.audited(by, action, target, reason_given, &asked)
            .await?;
        asked
    }

    async fn top_up(&self, by: &Acting, req: &TopUp, reason: &str) -> Result<TopUpDone> {
        let key = top_up_key(&req.key)?;
        let amount = req.amount;
        let pool = &self.engine.pool;
        let mut approval = store::approvals::top_up_by_key(pool, key.as_str()).await?;
        if approval.is_none() && amount.minor() > self.top_ups.four_eyes_above {
            approval = Some(
                store::approvals::request_top_up(
                    pool,
                    req.member_id,
                    amount.minor(),
                    key.as_str(),
                    by,
                    reason,
                )
                .await?,
            );
        }
        let Some(approval) = approval else {
            return self
                .deposit(req.member_id, amount, &key, &by.actor.name(), None)
                .await;
        };
        if approval.member_id != Some(req.member_id) || approval.amount != amount.minor() {
            return Err(ApiError::conflict(
                staff_codes::TOP_UP_KEY_REUSED,
                format!(
                    "key {} was used for a top-up of another member or amount (approval {})",
                    req.key, approval.id
                ),
            )
            .into());
        }
        match approval.state {
            ApprovalState::Pending => Ok(TopUpDone::AwaitingApproval(approval)),
            // Approved, but its deposit may not have got through: the same deposit again
            // (a replay of the key if it did), naming the people of the approval.
            ApprovalState::Approved => self.deposit_approved(&approval).await,
            ApprovalState::Rejected => Err(ApiError::conflict(
                staff_codes::APPROVAL_DECIDED,
                format!(
                    "the top-up under key {} was rejected (approval {}); a new top-up needs a new key",
                    req.key, approval.id
                ),
            )
            .into()),
        }
    }

    /// The deposit an approved top-up approval names, authorized as asked by its
    /// requester and approved by its decider.
    async fn deposit_approved(&self, approval: &ApprovalRow) -> Result<TopUpDone> {
        let breach = || {
            Error::from(Breach::ApprovalWithoutTarget {
                approval: approval.id,
            })
        };
        let member = approval.member_id.ok_or_else(breach)?;
        let key = approval
            .operation_key
            .as_deref()
            .and_then(|k| OperationKey::parse(k).ok())
            .ok_or_else(breach)?;
        let amount = Amount::new(approval.amount).map_err(|_| breach())?;
        self.deposit(
            member,
            amount,
            &key,
            &approval.requested_by_name,
            approval.decided_by_name.as_deref(),
        )
        .await
    }

    /// Deposits `amount` into `member`'s account under `key` through the member
    /// service, with a fresh deposit authorization naming the people.
    async fn deposit(
        &self,
        member: uuid::Uuid,
        amount: Amount,
        key: &OperationKey,
        requested_by: &str,
        approved_by: Option<&str>,
    ) -> Result<TopUpDone> {
        let Some(members) = &self.top_ups.members else {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                staff_codes::TOP_UP_UNAVAILABLE,
                "this orchestrator has no member service configured (MEMBER_URL)",
            )
            .into());
        };
        let authorization = self.top_ups.signer.sign(&DepositGrant {
            member_id: member.to_string(),
            amount: amount.minor(),
            operation_key: key.as_str().to_owned(),
            requested_by: requested_by.to_owned(),
            approved_by: approved_by.map(str::to_owned),
        });
        let answer = members
            .top_up(
                member,
                &TopUpRequest {
                    operation_key: key.clone(),
                    amount,
                    authorization: Some(authorization),
                },
            )
            .await
            .map_err(top_up_call)?;
        Ok(TopUpDone::Deposited {
            created: answer.status == StatusCode::CREATED.as_u16(),
            deposit: answer.body,
        })
    }

    /// A person's (or tool's) resume, with its note on the step log and its audit row.
    pub async fn resume_as(
        &self,
        by: &Acting,
        id: Uuid,
        reason: Option<String>,
    ) -> Result<PaymentRow> {
        let result = self
            .resume(id, &note("resumed", &by.actor.name(), reason.as_deref()))
            .await;
        self.audited(by, AuditAction::PaymentResumed, id, reason, &result)
            .await?;
        result
    }

    /// A person's (or tool's) refund: an operator's only up to
    /// `STAFF_OPERATOR_REFUND_LIMIT` (403 `REFUND_ABOVE_LIMIT` above it); a payment above
    /// `STAFF_FOUR_EYES_ABOVE` only once a second person approves it (the pending
    /// approval is the answer, the same one while it is pending). With its note on the
    /// step log and its audit row (`PAYMENT_REFUNDED`, or `REFUND_REQUESTED`).
    pub async fn refund_as(&self, by: &Acting, id: Uuid, reason: Option<String>) -> Result<Refund> {
        let gate = self.refund_gate(by, id).await;
        if let Ok(RefundGate::FourEyes { amount }) = gate {
            let result =
                store::approvals::request(&self.engine.pool, id, amount, by, reason.as_deref())
                    .await;
            self.audited(by, AuditAction::RefundRequested, id, reason, &result)
                .await?;
            return result.map(Refund::AwaitingApproval);
        }
        let result = match gate {
            Ok(_) => {
                let note = note("refund requested", &by.actor.name(), reason.as_deref());
                self.refund(id, &note).await
            }
            Err(e) => Err(e),
        };
        self.audited(by, AuditAction::PaymentRefunded, id, reason, &result)
            .await?;
        result.map(Refund::Done)
    }

    /// Whether `by` may refund payment `id`, and whether at once: an operator only up to
    /// their limit; a payment above `STAFF_FOUR_EYES_ABOVE` that a refund would move
    /// waits for a second person (one refunding or refunded already is answered as it
    /// is, one that cannot be refunded is refused, so neither asks for an approval).
    async fn refund_gate(&self, by: &Acting, id: Uuid) -> Result<RefundGate> {
        let row = self.load(id).await?;
        if by.actor.role() == StaffRole::Operator && row.amount > self.operator_refund_limit {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                staff_codes::REFUND_ABOVE_LIMIT,
                format!(
                    "an operator refunds payments of at most {} (minor units); this one is {}: an admin's to refund",
                    self.operator_refund_limit, row.amount
                ),
            )
            .into());
        }
        if row.amount <= self.four_eyes_above
            || matches!(row.state, State::RefundProcessing | State::Refunded)
        {
            return Ok(RefundGate::Now);
        }
        request_refund(row.position()?).map_err(|_| Error::NotRefundable(row.state))?;
        Ok(RefundGate::FourEyes { amount: row.amount })
    }

    /// The refund approvals, newest first, filtered by state, keyset paged by id.
    pub async fn approvals(&self, filter: &ListApprovals) -> Result<ApprovalPage> {
        let limit = page_limit(filter.limit)?;
        let state = state_filter::<ApprovalState>(
            filter.state.as_deref(),
            ": PENDING, APPROVED or REJECTED",
        )?;
        let kind = state_filter::<ApprovalKind>(filter.kind.as_deref(), ": REFUND or TOP_UP")?;
        let rows =
            store::approvals::list(&self.engine.pool, state, kind, filter.before, limit).await?;
        Ok(ApprovalPage {
            next_before: next_cursor(&rows, limit, |r| r.id),
            approvals: rows.iter().map(ApprovalRow::to_api).collect(),
        })
    }

    /// A second person's decision on approval `id`, with its audit row
    /// (`REFUND_APPROVED` / `REFUND_REJECTED` about the payment, `TOP_UP_APPROVED` /
    /// `TOP_UP_REJECTED` about the member). Refused: 404 `APPROVAL_NOT_FOUND`; 403
    /// `SAME_PERSON` for the one who asked; 409 `APPROVAL_DECIDED` once decided (of two
    /// deciding at once, one wins). An approval carries the refund out through
    /// [`Operations::refund`], its note naming both people, with its own
    /// `PAYMENT_REFUNDED` row; or the top-up's deposit, its authorization naming both
    /// people, with its own `TOP_UP` row.
    pub async fn decide_as(
        &self,
        by: &Acting,
        id: i64,
        decision: Decision,
        reason: Option<String>,
    ) -> Result<ApprovalDecided> {
        let found = store::approvals::load(&self.engine.pool, id).await?;
        let decided = match &found {
            None => Err(ApiError::not_found(
                staff_codes::APPROVAL_NOT_FOUND,
                format!("no approval {id}"),
            )
            .into()),
            Some(asked) => self.decide(by, asked, decision, reason.as_deref()).await,
        };
        let kind = found.as_ref().map_or(ApprovalKind::Refund, |a| a.kind);
        let target = found
            .as_ref()
            .map_or_else(|| format!("approval:{id}"), |a| a.to_api().target());
        self.audited(
            by,
            decision_action(kind, decision),
            target.clone(),
            reason.clone(),
            &decided,
        )
        .await?;
        let approval = decided?;
        if decision == Decision::Reject {
            return Ok(ApprovalDecided {
                approval: approval.to_api(),
                payment: None,
                deposit: None,
            });
        }
        if approval.kind == ApprovalKind::TopUp {
            let result = self.deposit_approved(&approval).await;
            self.audited(by, AuditAction::TopUp, target, reason, &result)
                .await?;
            let deposit = match result? {
                TopUpDone::Deposited { deposit, .. } => Some(deposit),
                TopUpDone::AwaitingApproval(_) => None,
            };
            return Ok(ApprovalDecided {
                approval: approval.to_api(),
                payment: None,
                deposit,
            });
        }
        let payment = approval.payment_id.ok_or(Breach::ApprovalWithoutTarget {
            approval: approval.id,
        })?;
        let note = format!(
            "{}; {}",
            note(
                "refund requested",
                &approval.requested_by_name,
                approval.reason.as_deref()
            ),
            note("approved", &by.actor.name(), reason.as_deref())
        );
        let result = self.refund(payment, &note).await;
        self.audited(by, AuditAction::PaymentRefunded, target, reason, &result)
            .await?;
        Ok(ApprovalDecided {
            approval: approval.to_api(),
            payment: Some(result?.to_admin()),
            deposit: None,
        })
    }

    /// The decision itself: the one who asked may not decide; a pending approval is
    /// decided by one conditional UPDATE.
    async fn decide(
        &self,
        by: &Acting,
        asked: &ApprovalRow,
        decision: Decision,
        reason: Option<&str>,
    ) -> Result<ApprovalRow> {
        if asked.requested_by.is_some() && asked.requested_by == by.actor.staff_id() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                staff_codes::SAME_PERSON,
                "four eyes: a refund or a top-up is approved or rejected by someone other than the one who asked for it",
            )
            .into());
        }
        store::approvals::decide(
            &self.engine.pool,
            asked.id,
            decided_state(decision),
            by,
            reason,
        )
        .await?
        .ok_or_else(|| {
            ApiError::conflict(
                staff_codes::APPROVAL_DECIDED,
                format!("approval {} was decided already", asked.id),
            )
            .into()
        })
    }

    /// The audit row of an action on `target` (a payment's id, a member's, an
    /// approval's): done (with what it left), refused (with the answer's code) or failed.
    async fn audited(
        &self,
        by: &Acting,
        action: AuditAction,
        target: impl ToString,
        reason: Option<String>,
        result: &Result<impl Left>,
    ) -> Result<()> {
        let entry = Entry::of(
            action,
            target.to_string(),
            reason,
            result,
            |done| Some(done.left()),
            |e| e.api().map(|a| a.code),
        );
        paysaga_staff::audit::record(&self.engine.pool, by, entry).await?;
        Ok(())
    }

    /// The payment `id`, or `PAYMENT_NOT_FOUND`.
    async fn load(&self, id: Uuid) -> Result<PaymentRow> {
        store::load(&self.engine.pool, id)
            .await?
            .ok_or(Error::PaymentNotFound)
    }

    /// The operator's list with its checks, newest first, keyset paged.
    pub async fn list(&self, filter: &ListPayments) -> Result<PaymentPage> {
        let limit = page_limit(filter.limit)?;
        let state = state_filter::<State>(filter.state.as_deref(), "")?;
        for (name, v) in [
            ("min_age_secs", filter.min_age_secs),
            ("max_age_secs", filter.max_age_secs),
        ] {
            if v.is_some_and(|v| !(0..=10 * 365 * 86_400).contains(&v)) {
                return Err(invalid_query(format!("{name} must be 0 to 315360000")));
            }
        }
        let rows = store::list(&self.engine.pool, filter, state, limit).await?;
        Ok(PaymentPage {
            next_cursor: next_cursor(&rows, limit, |r| r.id),
            payments: rows.iter().map(PaymentRow::to_admin).collect(),
        })
    }

    /// One payment and its step log.
    pub async fn timeline(&self, id: Uuid) -> Result<PaymentTimeline> {
        let row = self.load(id).await?;
        let steps = store::steps(&self.engine.pool, id).await?;
        Ok(PaymentTimeline {
            payment: row.to_admin(),
            steps,
        })
    }

    /// Resume: clear the attention flag and the attempt count, drive the payment now
    /// and wait up to `RESPONSE_WAIT_MS` for it to settle. `note` is recorded on the step.
    pub async fn resume(&self, id: Uuid, note: &str) -> Result<PaymentRow> {
        let engine = &self.engine;
        let row = self.load(id).await?;
        let pos = row.position()?;
        let Some(action) = pos.pending() else {
            return Err(Error::NotResumable(row.state));
        };
        let moved = store::operator_move(
            &engine.pool,
            &row,
            engine.instance,
            engine.lease,
            pos,
            action,
            note,
        )
        .await?;
        // None: someone holds a live lease; it is being driven already.
        let handle = moved.and_then(|moved| engine.spawn_drive(moved, None));
        engine
            .wait_for_terminal(id, handle, self.response_wait)
            .await
    }

    /// Refund a settled COMPLETED payment through the saga (a refund already under way
    /// is returned as it is); waits up to `RESPONSE_WAIT_MS`. `note` is recorded on the
    /// step.
    pub async fn refund(&self, id: Uuid, note: &str) -> Result<PaymentRow> {
        let engine = &self.engine;
        let row = self.load(id).await?;
        let pos = row.position()?;
        if matches!(pos.state(), State::RefundProcessing | State::Refunded) {
            return Ok(row);
        }
        let to = request_refund(pos).map_err(|_| Error::NotRefundable(row.state))?;
        let action = to.pending().ok_or(Breach::RefundOwesNothing {
            payment: row.id,
            state: to.state(),
        })?;
        let Some(moved) = store::operator_move(
            &engine.pool,
            &row,
            engine.instance,
            engine.lease,
            to,
            action,
            note,
        )
        .await?
        else {
            let now = self.load(id).await?;
            if matches!(now.state, State::RefundProcessing | State::Refunded) {
                return Ok(now);
            }
            return Err(Error::NotRefundable(now.state));
        };
        let handle = engine.spawn_drive(moved, None);
        engine
            .wait_for_terminal(id, handle, self.response_wait)
            .await
    }

    /// Payments per product and state, with the attention count and the last minute's
    /// rates, as the console's drop page shows them.
    pub async fn by_product(&self) -> Result<BTreeMap<Option<i64>, ProductPayments>> {
        let mut out: BTreeMap<Option<i64>, ProductPayments> = BTreeMap::new();
        for c in store::product_census(&self.engine.pool).await? {
            let p = out.entry(c.product_id).or_default();
            p.by_state.insert(c.state, c.n);
            p.attention += c.attention;
            p.created_last_minute += c.created_last_minute;
            match c.state {
                State::Completed => p.completed_last_minute += c.updated_last_minute,
                State::Failed => p.failed_last_minute += c.updated_last_minute,
                State::Refunded => p.refunded_last_minute += c.updated_last_minute,
                _ => {}
            }
        }
        Ok(out)
    }
}

impl From<Error> for DeskError {
    fn from(e: Error) -> Self {
        DeskError::new(e.api(), e)
    }
}

/// The console's view of payments: the very functions the operator API runs.
impl PaymentDesk for Operations {
    fn list<'a>(&'a self, filter: &'a ListPayments) -> Answer<'a, PaymentPage> {
        Box::pin(async move { Ok(Operations::list(self, filter).await?) })
    }

    fn timeline(&self, id: Uuid) -> Answer<'_, PaymentTimeline> {
        Box::pin(async move { Ok(Operations::timeline(self, id).await?) })
    }

    fn resume<'a>(
        &'a self,
        by: &'a Acting,
        id: Uuid,
        reason: Option<String>,
    ) -> Answer<'a, PaymentAdmin> {
        Box::pin(async move { Ok(self.resume_as(by, id, reason).await?.to_admin()) })
    }

    fn refund<'a>(
        &'a self,
        by: &'a Acting,
        id: Uuid,
        reason: Option<String>,
    ) -> Answer<'a, RefundAnswer> {
        Box::pin(async move { Ok(self.refund_as(by, id, reason).await?.to_api()) })
    }

    fn approvals<'a>(&'a self, filter: &'a ListApprovals) -> Answer<'a, ApprovalPage> {
        Box::pin(async move { Ok(Operations::approvals(self, filter).await?) })
    }

    fn decide<'a>(
        &'a self,
        by: &'a Acting,
        id: i64,
        decision: Decision,
        reason: Option<String>,
    ) -> Answer<'a, ApprovalDecided> {
        Box::pin(async move { Ok(self.decide_as(by, id, decision, reason).await?) })
    }

    fn by_product(&self) -> Answer<'_, BTreeMap<Option<i64>, ProductPayments>> {
        Box::pin(async move { Ok(Operations::by_product(self).await?) })
    }

    fn traceparent(&self, id: Uuid) -> Answer<'_, Option<String>> {
        Box::pin(async move { Ok(store::traceparent(&self.engine.pool, id).await?) })
    }

    fn series(&self) -> Answer<'_, BTreeMap<i64, DropSeries>> {
        Box::pin(async move { Ok(store::drop_series(&self.engine.pool).await?) })
    }
}
