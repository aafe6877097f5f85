//! The typed client other services use to call the account service.

use paysaga_common::client::{Answer, CallError, ServiceClient};

use super::api::{
    Account, AccountBatch, AccountView, CreditRequest, DebitRequest, DepositRequest, Hold,
    HoldPage, HoldRequest, ListHolds, OpenAccountRequest, Transaction, Transfer, TransferRequest,
};
use crate::batch::Replies;

/// Calls the account service with a service credential. Every method returns the
/// definite answer, `CallError::Rejected` (a 4xx with its code, see `api::AccountCode`), or
/// `CallError::Unknown` (timeout, connection error, 5xx): then ask
/// [`AccountClient::transaction_by_key`] what really happened.
#[derive(Clone, Debug)]
pub struct AccountClient {
    inner: ServiceClient,
}

service_client_constructors!(AccountClient, paysaga_common::auth::Audience::Account);

impl AccountClient {
    /// `POST /v1/accounts` -> 201 `Account`.
    pub async fn open_account(
        &self,
        req: &OpenAccountRequest,
    ) -> Result<Answer<Account>, CallError> {
        self.inner.post("/v1/accounts", req).await
    }

    /// `POST /v1/deposits` -> 201 `Transaction` (200 on replay): a top-up paid in from
    /// outside. 409 `OPERATION_KEY_REUSED` a different request on the key.
    pub async fn deposit(&self, req: &DepositRequest) -> Result<Answer<Transaction>, CallError> {
        self.inner.post("/v1/deposits", req).await
    }

    /// `GET /v1/accounts/{id}` -> `AccountView`.
    pub async fn get_account(&self, id: i64) -> Result<Answer<AccountView>, CallError> {
        self.inner.get(&format!("/v1/accounts/{id}")).await
    }

    /// `POST /v1/debits` -> 201 `Transaction` (200 on replay). 422 `INSUFFICIENT_FUNDS`
    /// is a definite decline; 409 `OPERATION_KEY_REUSED` a different request on the key.
    pub async fn debit(&self, req: &DebitRequest) -> Result<Answer<Transaction>, CallError> {
        self.inner.post("/v1/debits", req).await
    }

    /// `POST /v1/credits` -> 201 `Transaction` (200 on replay): a refund of `refund_of`.
    pub async fn credit(&self, req: &CreditRequest) -> Result<Answer<Transaction>, CallError> {
        self.inner.post("/v1/credits", req).await
    }

    /// `POST /v1/transfers` with `Idempotency-Key` (a buyer token: from the buyer's own
    /// account) -> 201 `Transfer` (200 with the same transfer on a replay). 422
    /// `INSUFFICIENT_FUNDS` (nothing written) or `TRANSFER_TO_SELF`, 404
    /// `ACCOUNT_NOT_FOUND` (no such recipient, or the caller has no account), 409
    /// `OPERATION_KEY_REUSED` (the key with another recipient or amount).
    pub async fn transfer(
        &self,
        idempotency_key: &str,
        req: &TransferRequest,
    ) -> Result<Answer<Transfer>, CallError> {
        self.inner
            .call_with_headers(
                reqwest::Method::POST,
                "/v1/transfers",
                &[("idempotency-key", idempotency_key)],
                Some(req),
            )
            .await
    }

    /// `POST /v1/batch` -> 200 `Replies`, one per operation in order (see
    /// [`crate::batch::Reply::into_answer`]). A non-2xx answer concerns the whole batch.
    pub async fn batch(&self, req: &AccountBatch) -> Result<Answer<Replies>, CallError> {
        self.inner.post("/v1/batch", req).await
    }

    /// `POST /v1/holds` -> 201 `Hold` (200 with the hold as it is now on a replay, in any
    /// state). 422 `INSUFFICIENT_FUNDS` (nothing held, nothing recorded), 404
    /// `ACCOUNT_NOT_FOUND` (the member has no account), 409 `OPERATION_KEY_REUSED`.
    pub async fn place_hold(&self, req: &HoldRequest) -> Result<Answer<Hold>, CallError> {
        self.inner.post("/v1/holds", req).await
    }

    /// `POST /v1/holds/{key}/release` -> 200 `Hold` (`RELEASED`, also on a replay).
    /// 409 `HOLD_CAPTURED`, 404 `HOLD_NOT_FOUND`.
    pub async fn release_hold(&self, key: &str) -> Result<Answer<Hold>, CallError> {
        self.inner
            .post(
                &format!("/v1/holds/{}/release", encode_segment(key)),
                &serde_json::json!({}),
            )
            .await
    }

    /// `GET /v1/holds/{key}` -> `Hold`, or 404 `HOLD_NOT_FOUND`.
    pub async fn hold(&self, key: &str) -> Result<Answer<Hold>, CallError> {
        self.inner
            .get(&format!("/v1/holds/{}", encode_segment(key)))
            .await
    }

    /// `GET /v1/holds?...`: live holds placed at least `older_than_ms` ago, oldest first.
    pub async fn holds(&self, q: &ListHolds) -> Result<Answer<HoldPage>, CallError> {
        let query = crate::query_string([
            ("older_than_ms", Some(q.older_than_ms.to_string())),
            (
                "after_created_at",
                q.after_created_at
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
            ),
            ("after_id", q.after_id.map(|id| id.to_string())),
            ("limit", q.limit.map(|l| l.to_string())),
        ])?;
        self.inner.get(&format!("/v1/holds?{query}")).await
    }

    /// `GET /v1/transactions/{key}` -> `Transaction` (a DECLINED debit included), or
    /// 404 `TRANSACTION_NOT_FOUND` when nothing was ever recorded under the key.
    pub async fn transaction_by_key(&self, key: &str) -> Result<Answer<Transaction>, CallError> {
        self.inner
            .get(&format!("/v1/transactions/{}", encode_segment(key)))
            .await
    }
}

/// Percent-encodes a path segment, so a malformed key reaches the server (and is
/// refused there with a code) instead of changing the path.
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::encode_segment;

    #[test]
    fn keys_stay_one_segment() {
        assert_eq!(encode_segment("pay:1:debit"), "pay:1:debit");
        assert_eq!(encode_segment("a/b c"), "a%2Fb%20c");
    }
}
