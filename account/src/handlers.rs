//! HTTP handlers: identity, parsing at the edge, and the status each outcome gets.

use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
};
use paysaga_common::{
    auth::{
        allow::{MEMBER, OPERATOR, ORCHESTRATOR, ORDER},
        Buyer, Caller, Service, ServiceRole,
    },
    deposits::{DepositGrant, DepositRefusal},
    extract::{Json, Path, Query},
    telemetry, ApiError, ErrorBody,
};

use paysaga_contracts::batch::Replies;
use serde::Serialize;

use crate::{
    accounts,
    api::{
        Account, AccountBatch, AccountKind, AccountOp, AccountView, CreditRequest, DebitRequest,
        DepositRequest, Hold, HoldPage, HoldRequest, ListHolds, OpenAccountRequest, OperationKey,
        ReleaseRequest, Transaction, Transfer, TransferKey, TransferRequest,
    },
    batch,
    deposit::ApprovedDeposit,
    error::{Error, Result},
    holds,
    ledger::{self, Recorded},
    transfer::TransferOrder,
    AppState,
};

fn recorded<T: Serialize>(r: Recorded<T>) -> impl IntoResponse {
    let status = if r.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (status, Json(r.value))
}

/// Open a member account with an opening deposit.
#[utoipa::path(post, path = "/v1/accounts", security(("service" = [])), tag = "accounts", request_body = OpenAccountRequest,
    responses(
        (status = 201, body = Account),
        (status = 200, body = Account, description = "an `open_key` that already opened this account"),
        (status = 409, body = ErrorBody, description = "OPERATION_KEY_REUSED: the open_key opened a different request"),
        (status = 422, body = ErrorBody, description = "INVALID_OPENING_BALANCE, INVALID_BODY"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "buyer token"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0))]
pub async fn open_account(
    State(state): State<AppState>,
    service: Service<{ MEMBER | OPERATOR }>,
    Json(req): Json<OpenAccountRequest>,
) -> Result<impl IntoResponse> {
    let max_opening = if state.openings_with_money {
        accounts::MAX_OPENING_BALANCE
    } else {
        0
    };
    Ok(recorded(
        accounts::open(&state.pool, &req, max_opening).await?,
    ))
}

/// Pay money in from outside (a staff top-up, forwarded by the member service) to a
/// member account, once per operation key, as the orchestrator's signed deposit
/// authorization grants it: signed with a key registered for the orchestrator, within
/// its 60 s, naming this account's member, this amount and this key. The ledger row
/// records who asked and who approved.
#[utoipa::path(post, path = "/v1/deposits", security(("service" = [])), tag = "ledger", request_body = DepositRequest,
    responses(
        (status = 201, body = Transaction, description = "applied"),
        (status = 200, body = Transaction, description = "replay of the same request"),
        (status = 403, body = ErrorBody, description = "DEPOSIT_NOT_APPROVED: no valid authorization of the orchestrator naming this deposit, nothing written; FORBIDDEN_CALLER (the member service only)"),
        (status = 409, body = ErrorBody, description = "OPERATION_KEY_REUSED"),
        (status = 404, body = ErrorBody, description = "ACCOUNT_NOT_FOUND"),
        (status = 422, body = ErrorBody, description = "ACCOUNT_NOT_MEMBER, AMOUNT_OUT_OF_RANGE, INVALID_BODY"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0, account_id = req.account_id, operation_key = %req.operation_key))]
pub async fn deposit(
    State(state): State<AppState>,
    service: Service<{ MEMBER }>,
    Json(req): Json<DepositRequest>,
) -> Result<impl IntoResponse> {
    let grant = approved(&state, &req).await?;
    let approved = ApprovedDeposit::new(req, grant);
    Ok(recorded(batch::one(&state.pool, approved).await?))
}

/// The grant of `req`'s authorization, checked against the account it names: refused
/// 403 `DEPOSIT_NOT_APPROVED` before anything is written (404 for no such account, 422
/// for the merchant's).
async fn approved(state: &AppState, req: &DepositRequest) -> Result<DepositGrant> {
    let refuse = Error::DepositNotApproved;
    let account = accounts::by_ids(&state.pool, &[req.account_id])
        .await?
        .remove(&req.account_id);
    // The signature first: without one, nothing about the account is told.
    let member = account.as_ref().map_or("", |a| a.member_id.as_str());
    match state.deposits.verify(
        req.authorization.as_deref(),
        member,
        req.amount.minor(),
        req.operation_key.as_str(),
    ) {
        Ok(grant) => match account {
            None => Err(Error::AccountNotFound(req.account_id)),
            Some(a) if a.kind != AccountKind::Member => Err(Error::AccountNotMember(a.id)),
            Some(_) => Ok(grant),
        },
        Err(DepositRefusal::Mismatch("member")) if account.is_none() => {
            Err(Error::AccountNotFound(req.account_id))
        }
        Err(e) => Err(refuse(e)),
    }
}

/// Move money from the caller's own account (their first member account) to another
/// member's, once per `Idempotency-Key`: both sides in one statement, applied only if
/// the caller's available balance (balance minus what holds hold) covers it.
#[utoipa::path(post, path = "/v1/transfers", security(("buyer" = [])), tag = "transfers", request_body = TransferRequest,
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 48, pattern = "^[A-Za-z0-9_.:-]{1,48}$",
        description = "1-48 characters of [A-Za-z0-9_.:-], unique per transfer of this member; reuse it on retries")),
    responses(
        (status = 201, body = Transfer, description = "applied: the TRANSFER_OUT and TRANSFER_IN rows written"),
        (status = 200, body = Transfer, description = "the same key and body again: the transfer as first answered, nothing moved again"),
        (status = 400, body = ErrorBody, description = "INVALID_OPERATION_KEY: the Idempotency-Key is missing or malformed; MALFORMED_JSON"),
        (status = 401, body = ErrorBody, description = "UNAUTHENTICATED"),
        (status = 403, body = ErrorBody, description = "FORBIDDEN: a service credential (a transfer is a member's own)"),
        (status = 404, body = ErrorBody, description = "ACCOUNT_NOT_FOUND: no such recipient (a missing member account, the merchant's), or the caller has no account; nothing written"),
        (status = 409, body = ErrorBody, description = "OPERATION_KEY_REUSED: the key was used for another recipient or amount"),
        (status = 413, body = ErrorBody, description = "PAYLOAD_TOO_LARGE"),
        (status = 415, body = ErrorBody, description = "UNSUPPORTED_MEDIA_TYPE"),
        (status = 422, body = ErrorBody, description = "INSUFFICIENT_FUNDS: the available balance does not cover it, nothing written; TRANSFER_TO_SELF; AMOUNT_OUT_OF_RANGE; INVALID_BODY"),
        (status = 429, body = ErrorBody, description = "RATE_LIMITED, with Retry-After: nothing done"),
        (status = 503, body = ErrorBody, description = "UNAVAILABLE: retry with the same Idempotency-Key, which tells whether it was applied"),
    ))]
#[tracing::instrument(skip_all, fields(member = %member))]
pub async fn transfer(
    State(state): State<AppState>,
    Buyer(member): Buyer,
    headers: HeaderMap,
    Json(req): Json<TransferRequest>,
) -> Result<impl IntoResponse> {
    // First, before anything is read: a refused request has done nothing.
    state.limiter.check(&member)?;
    let key = transfer_key(&headers)?;
    let order = TransferOrder {
        key: key.operation_key(&member),
        sender: member,
        to: req.to,
        amount: req.amount,
    };
    Ok(recorded(
        batch::one(&state.pool, order).await?.map(|r| r.transfer),
    ))
}

/// The one `Idempotency-Key` header a transfer carries.
fn transfer_key(headers: &HeaderMap) -> Result<TransferKey> {
    let mut values = headers.get_all("idempotency-key").iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(Error::InvalidOperationKey(
            "send exactly one Idempotency-Key header: a key unique per transfer, reused on retries",
        ));
    };
    let value = value
        .to_str()
        .map_err(|_| Error::InvalidOperationKey("Idempotency-Key must be visible ASCII"))?;
    TransferKey::parse(value).map_err(Error::InvalidOperationKey)
}

/// An account and its recent debits and credits: a buyer sees only their own.
#[utoipa::path(get, path = "/v1/accounts/{id}", security(("buyer" = []), ("service" = [])), tag = "accounts",
    params(("id" = i64, Path, description = "account id")),
    responses(
        (status = 200, body = AccountView),
        (status = 404, body = ErrorBody, description = "ACCOUNT_NOT_FOUND (also someone else's account)"),
        (status = 400, body = ErrorBody, description = "INVALID_PATH"),
    ))]
#[tracing::instrument(skip_all, fields(account_id = id))]
pub async fn get_account(
    State(state): State<AppState>,
    caller: Caller<{ ORCHESTRATOR | OPERATOR }>,
    Path(id): Path<i64>,
) -> Result<Json<AccountView>> {
    let view = accounts::view(&state.pool, id)
        .await?
        .ok_or(Error::AccountNotFound(id))?;
    // Others' accounts answer exactly like missing ones, so ids cannot be probed; the
    // merchant account is for services only.
    let visible = match caller {
        Caller::Service(_) => true,
        Caller::Buyer(_) => {
            view.account.kind == AccountKind::Member && caller.may_access(&view.account.member_id)
        }
    };
    if !visible {
        return Err(Error::AccountNotFound(id));
    }
    Ok(Json(view))
}

/// Debit a member account to the merchant, once per operation key.
#[utoipa::path(post, path = "/v1/debits", security(("service" = [])), tag = "ledger", request_body = DebitRequest,
    responses(
        (status = 201, body = Transaction, description = "applied"),
        (status = 200, body = Transaction, description = "replay of the same request"),
        (status = 422, body = ErrorBody, description = "INSUFFICIENT_FUNDS (recorded; the key stays declined), ACCOUNT_NOT_MEMBER, INVALID_BODY"),
        (status = 409, body = ErrorBody, description = "OPERATION_KEY_REUSED"),
        (status = 404, body = ErrorBody, description = "ACCOUNT_NOT_FOUND"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0))]
pub async fn debit(
    State(state): State<AppState>,
    service: Service<{ ORCHESTRATOR }>,
    Json(req): Json<DebitRequest>,
) -> Result<impl IntoResponse> {
    let outcomes = batch::debits(&state.pool, state.merchant_shards, vec![(0, req)]).await?;
    Ok(recorded(batch::lone(outcomes)?))
}

/// Refund (part of) a debit, merchant back to the member, once per operation key.
#[utoipa::path(post, path = "/v1/credits", security(("service" = [])), tag = "ledger", request_body = CreditRequest,
    responses(
        (status = 201, body = Transaction, description = "applied"),
        (status = 200, body = Transaction, description = "replay of the same request"),
        (status = 422, body = ErrorBody, description = "REFUND_EXCEEDS_DEBIT, DEBIT_DECLINED, REFUND_ACCOUNT_MISMATCH, ACCOUNT_NOT_MEMBER"),
        (status = 409, body = ErrorBody, description = "OPERATION_KEY_REUSED"),
        (status = 404, body = ErrorBody, description = "DEBIT_NOT_FOUND, ACCOUNT_NOT_FOUND"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0))]
pub async fn credit(
    State(state): State<AppState>,
    service: Service<{ ORCHESTRATOR }>,
    Json(req): Json<CreditRequest>,
) -> Result<impl IntoResponse> {
    Ok(recorded(batch::one(&state.pool, req).await?))
}

/// What happened under an operation key: how a caller learns the truth after a timeout.
#[utoipa::path(get, path = "/v1/transactions/{operation_key}", security(("service" = [])), tag = "ledger",
    params(("operation_key" = String, Path, min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_.:-]{1,128}$")),
    responses(
        (status = 200, body = Transaction, description = "APPLIED or DECLINED"),
        (status = 404, body = ErrorBody, description = "TRANSACTION_NOT_FOUND: nothing ever happened under this key"),
        (status = 400, body = ErrorBody, description = "INVALID_OPERATION_KEY"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0, operation_key = %key))]
pub async fn transaction_by_key(
    State(state): State<AppState>,
    service: Service<{ ORCHESTRATOR | OPERATOR }>,
    Path(key): Path<String>,
) -> Result<Json<Transaction>> {
    let key = OperationKey::parse(key).map_err(Error::InvalidOperationKey)?;
    let found = ledger::by_key(&state.pool, key.as_str()).await?;
    found
        .map(Json)
        .ok_or_else(|| Error::TransactionNotFound(key.to_string()))
}

/// Hold an amount of a member's account for a while, once per operation key: placed
/// only if the available balance covers it.
#[utoipa::path(post, path = "/v1/holds", security(("service" = [])), tag = "holds", request_body = HoldRequest,
    responses(
        (status = 201, body = Hold, description = "held until expires_at"),
        (status = 200, body = Hold, description = "replay of the same request: the hold as it is now (HELD, CAPTURED or RELEASED)"),
        (status = 422, body = ErrorBody, description = "INSUFFICIENT_FUNDS (nothing held, nothing recorded), INVALID_BODY"),
        (status = 404, body = ErrorBody, description = "ACCOUNT_NOT_FOUND: the member has no account"),
        (status = 409, body = ErrorBody, description = "OPERATION_KEY_REUSED"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0, operation_key = %req.operation_key))]
pub async fn place_hold(
    State(state): State<AppState>,
    service: Service<{ ORDER }>,
    Json(req): Json<HoldRequest>,
) -> Result<impl IntoResponse> {
    Ok(recorded(
        batch::one(&state.pool, req).await?.map(|r| r.hold),
    ))
}

/// Release a hold: its money is available again. Once per hold; a replay answers the
/// same.
#[utoipa::path(post, path = "/v1/holds/{operation_key}/release", security(("service" = [])), tag = "holds",
    params(("operation_key" = String, Path, min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_.:-]{1,128}$")),
    responses(
        (status = 200, body = Hold, description = "RELEASED (now or before; a hold that lapsed and was swept included)"),
        (status = 409, body = ErrorBody, description = "HOLD_CAPTURED: a debit took the money"),
        (status = 404, body = ErrorBody, description = "HOLD_NOT_FOUND"),
        (status = 400, body = ErrorBody, description = "INVALID_OPERATION_KEY"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0, operation_key = %key))]
pub async fn release_hold(
    State(state): State<AppState>,
    service: Service<{ ORDER | OPERATOR }>,
    Path(key): Path<String>,
) -> Result<impl IntoResponse> {
    if service.0 == ServiceRole::Operator && !state.openings_with_money {
        return Err(Error::Api(ApiError::new(
            StatusCode::FORBIDDEN,
            paysaga_common::error::codes::FORBIDDEN_CALLER,
            "outside development mode a hold is released by the order service that placed \
             it (a cancel, an expiry, a failed payment), never by the operator tools",
        )));
    }
    let operation_key = OperationKey::parse(key).map_err(Error::InvalidOperationKey)?;
    let released = batch::one(&state.pool, ReleaseRequest { operation_key }).await?;
    Ok(recorded(released.map(|r| r.hold)))
}

/// A hold by its operation key.
#[utoipa::path(get, path = "/v1/holds/{operation_key}", security(("service" = [])), tag = "holds",
    params(("operation_key" = String, Path, min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_.:-]{1,128}$")),
    responses(
        (status = 200, body = Hold),
        (status = 404, body = ErrorBody, description = "HOLD_NOT_FOUND"),
        (status = 400, body = ErrorBody, description = "INVALID_OPERATION_KEY"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0, operation_key = %key))]
pub async fn get_hold(
    State(state): State<AppState>,
    service: Service<{ ORDER | ORCHESTRATOR | OPERATOR }>,
    Path(key): Path<String>,
) -> Result<Json<Hold>> {
    let key = OperationKey::parse(key).map_err(Error::InvalidOperationKey)?;
    holds::by_key(&state.pool, key.as_str())
        .await?
        .map(Json)
        .ok_or_else(|| Error::HoldNotFound(key.to_string()))
}

/// Live holds placed at least `older_than_ms` ago, oldest first: how the order service
/// finds holds whose reservation never came to be.
#[utoipa::path(get, path = "/v1/holds", security(("service" = [])), tag = "holds", params(ListHolds),
    responses(
        (status = 200, body = HoldPage),
        (status = 400, body = ErrorBody, description = "INVALID_QUERY"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0))]
pub async fn list_holds(
    State(state): State<AppState>,
    service: Service<{ ORDER | OPERATOR }>,
    Query(q): Query<ListHolds>,
) -> Result<Json<HoldPage>> {
    Ok(Json(holds::list(&state.pool, &q).await?))
}

/// Many operations in one request, each answered as its own endpoint would answer it;
/// the debits among them are applied together, in one statement unless an account
/// repeats.
#[utoipa::path(post, path = "/v1/batch", security(("service" = [])), tag = "batch", request_body = AccountBatch,
    responses(
        (status = 200, body = Replies, description = "one reply {status, body} per operation, in order: debit as POST /v1/debits, credit as POST /v1/credits, account as GET /v1/accounts/{id} (the Account alone), transaction as GET /v1/transactions/{key}"),
        (status = 400, body = ErrorBody, description = "BATCH_TOO_LARGE (no operations, or more than 1000): nothing applied; MALFORMED_JSON"),
        (status = 422, body = ErrorBody, description = "INVALID_BODY (any operation malformed): nothing applied"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "buyer token; FORBIDDEN_CALLER: an operation the caller's role may not send (the saga: debit, credit, account, transaction; the order service: hold, release), nothing applied"),
        (status = 500, body = ErrorBody, description = "the batch failed as a whole: the statement that failed applied nothing, and any committed before it (a batch whose accounts repeat runs in rounds) are found by key; ask by key"),
        (status = 503, body = ErrorBody, description = "UNAVAILABLE: nothing was done"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0, ops = req.ops.len()))]
pub async fn batch(
    State(state): State<AppState>,
    service: Service<{ ORCHESTRATOR | ORDER }>,
    Json(req): Json<AccountBatch>,
) -> Result<Json<Replies>> {
    admit_ops(service.0, &req.ops)?;
    let spans =
        telemetry::batch_op_spans(&req.traceparents, req.ops.len(), |i| op_span(&req.ops[i]));
    let results = batch::answer(&state.pool, state.merchant_shards, req.ops).await?;
    for (span, reply) in spans.iter().zip(&results) {
        span.record("status", reply.status);
    }
    Ok(Json(Replies { results }))
}

/// Each operation of a batch must be one its caller's role may send (see
/// [`AccountOp::allowed_roles`]); otherwise the whole batch is refused before anything
/// is applied.
fn admit_ops(role: ServiceRole, ops: &[AccountOp]) -> Result<()> {
    match ops.iter().find(|op| !role.allowed_by(op.allowed_roles())) {
        None => Ok(()),
        Some(op) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            paysaga_common::error::codes::FORBIDDEN_CALLER,
            format!(
                "a {} credential may not send a {} operation",
                role,
                op_name(op)
            ),
        )
        .into()),
    }
}

fn op_name(op: &AccountOp) -> &'static str {
    match op {
        AccountOp::Debit(_) => "debit",
        AccountOp::Credit(_) => "credit",
        AccountOp::Account { .. } => "account",
        AccountOp::Transaction { .. } => "transaction",
        AccountOp::Hold(_) => "hold",
        AccountOp::Release(_) => "release",
    }
}

/// The span of one batch operation in its payment's trace (see
/// [`telemetry::batch_op_spans`]), named like the endpoint it stands for.
fn op_span(op: &AccountOp) -> tracing::Span {
    let (name, key) = match op {
        AccountOp::Debit(d) => ("account debit", Some(d.operation_key.as_str())),
        AccountOp::Credit(c) => ("account credit", Some(c.operation_key.as_str())),
        AccountOp::Account { .. } => ("account lookup", None),
        AccountOp::Transaction { operation_key } => {
            ("account transaction by key", Some(operation_key.as_str()))
        }
        AccountOp::Hold(h) => ("account hold", Some(h.operation_key.as_str())),
        AccountOp::Release(r) => ("account release", Some(r.operation_key.as_str())),
    };
    tracing::info_span!(
        "batch op",
        otel.name = name,
        operation_key = key,
        payment_id = key.and_then(payment_of),
        status = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    )
}

/// The payment an operation key of the saga names (`pay:{id}:{step}`).
fn payment_of(key: &str) -> Option<&str> {
    key.strip_prefix("pay:")?.split(':').next()
}

/// Ready when PostgreSQL answers.
pub async fn readyz(State(state): State<AppState>) -> axum::response::Response {
    let db = paysaga_common::server::check_db(&state.pool).await;
    paysaga_common::server::readiness(vec![("postgres", db)], false)
}
