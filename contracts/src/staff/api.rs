//! The staff routes' wire types and codes.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::account::api::Transaction;
use crate::orchestrator::api::PaymentAdmin;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Error codes of the staff routes, beside the common ones. Stable: callers match on them.
pub mod codes {
    paysaga_common::error_codes! {
        /// Sign-in refused: no such staff member, a wrong password, or a wrong (or
        /// already used) second-factor code; which of them is not said (401).
        STAFF_SIGN_IN_FAILED,
        /// Too many sign-in attempts for this email or from this address (429, `Retry-After`).
        TOO_MANY_SIGN_IN_ATTEMPTS,
        /// The signed-in person's role is not one this route admits (403).
        FORBIDDEN_ROLE,
        /// The operator tools' service credential, outside development mode: staff
        /// routes are for people (it only makes the first admin); sign in (403).
        PEOPLE_ONLY,
        /// A staff account with this email exists already (409).
        STAFF_EMAIL_TAKEN,
        /// Not an email address a staff account can have (422).
        STAFF_EMAIL_INVALID,
        /// An operator's refund above `STAFF_OPERATOR_REFUND_LIMIT` (403): an admin's to make.
        REFUND_ABOVE_LIMIT,
        /// A reason typed by the person is required for this action, at most 500 characters (422).
        REASON_INVALID,
        /// The audit query's filters do not parse (400).
        INVALID_AUDIT_QUERY,
        /// No approval with this id (404).
        APPROVAL_NOT_FOUND,
        /// The approval was decided already, approved or rejected (409): a decision is
        /// made once.
        APPROVAL_DECIDED,
        /// The person deciding an approval is the one who asked for the refund or
        /// top-up (403): four eyes means two people.
        SAME_PERSON,
        /// A top-up's key is not 1-64 characters of `[A-Za-z0-9_.:-]` (422).
        INVALID_TOP_UP_KEY,
        /// The top-up's key was used for a top-up of another member or amount (409).
        TOP_UP_KEY_REUSED,
        /// The member service is not configured (`MEMBER_URL`) or did not answer: the
        /// top-up was not carried out; asking again with the same key is safe (503).
        TOP_UP_UNAVAILABLE,
    }
}

/// What a staff member may do. The routes each name the roles they admit
/// (docs/security.md has the matrix): a viewer reads everything; an operator also
/// resumes and refunds payments (up to a limit) and replays webhook deliveries; an
/// admin also manages staff accounts, webhook endpoints, products and top-ups, and
/// approves or rejects the refunds others asked for above `STAFF_FOUR_EYES_ABOVE`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StaffRole {
    Viewer,
    Operator,
    Admin,
}

crate::wire_names!(StaffRole { Viewer => VIEWER, Operator => OPERATOR, Admin => ADMIN });

/// What a staff member did, as the audit trail names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AuditAction {
    SignIn,
    SignInFailed,
    SignOut,
    StaffCreated,
    PaymentResumed,
    PaymentRefunded,
    WebhookReplayed,
    WebhookEndpointCreated,
    WebhookEndpointChanged,
    ProductChanged,
    TopUp,
    /// A refund above `STAFF_FOUR_EYES_ABOVE` asked for: an approval awaits a second person.
    RefundRequested,
    /// A second person approved a refund (the refund's own row follows, `PAYMENT_REFUNDED`).
    RefundApproved,
    /// A second person rejected a refund: nothing was refunded.
    RefundRejected,
    /// A top-up above `STAFF_TOP_UP_FOUR_EYES_ABOVE` asked for: an approval awaits a
    /// second person.
    TopUpRequested,
    /// A second person approved a top-up (the deposit's own row follows, `TOP_UP`).
    TopUpApproved,
    /// A second person rejected a top-up: nothing was deposited.
    TopUpRejected,
}

crate::wire_names!(AuditAction {
    SignIn => SIGN_IN,
    SignInFailed => SIGN_IN_FAILED,
    SignOut => SIGN_OUT,
    StaffCreated => STAFF_CREATED,
    PaymentResumed => PAYMENT_RESUMED,
    PaymentRefunded => PAYMENT_REFUNDED,
    WebhookReplayed => WEBHOOK_REPLAYED,
    WebhookEndpointCreated => WEBHOOK_ENDPOINT_CREATED,
    WebhookEndpointChanged => WEBHOOK_ENDPOINT_CHANGED,
    ProductChanged => PRODUCT_CHANGED,
    TopUp => TOP_UP,
    RefundRequested => REFUND_REQUESTED,
    RefundApproved => REFUND_APPROVED,
    RefundRejected => REFUND_REJECTED,
    TopUpRequested => TOP_UP_REQUESTED,
    TopUpApproved => TOP_UP_APPROVED,
    TopUpRejected => TOP_UP_REJECTED,
});

/// How an audited action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AuditOutcome {
    /// It was carried out.
    Done,
    /// It was refused (its answer's code is in `detail`); nothing changed.
    Refused,
    /// It failed inside the system; nothing is known to have changed.
    Failed,
}

crate::wire_names!(AuditOutcome { Done => DONE, Refused => REFUSED, Failed => FAILED });

/// `POST /v1/staff/sessions`: sign in with a password and a second factor (a code of
/// the authenticator app, or one of the recovery codes).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SignIn {
    pub email: String,
    pub password: String,
    /// The six-digit TOTP code, or an unused recovery code.
    pub code: String,
}

/// A new staff session.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StaffSession {
    /// The session token: `Authorization: Bearer <token>` on the staff routes until
    /// `expires_at` or sign-out. Shown this once; only its hash is stored.
    pub token: String,
    pub expires_at: DateTime<Utc>,
    pub staff: StaffMember,
}

/// A staff account as the API shows it (never its password hash or second-factor secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StaffMember {
    pub id: i64,
    pub email: String,
    pub role: StaffRole,
    pub created_at: DateTime<Utc>,
}

/// `POST /v1/staff` (admins): a new staff account.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateStaff {
    /// An email address as members' are checked, without `:` (it names the second
    /// factor in an authenticator app's `otpauth://` label).
    #[schema(schema_with = crate::schemas::staff_email)]
    pub email: String,
    /// The password rules ([`paysaga_common::password::schema`]).
    #[schema(schema_with = paysaga_common::password::schema)]
    pub password: String,
    pub role: StaffRole,
    /// Why the account is made (audit trail).
    #[schema(
        min_length = 1,
        max_length = 500,
        pattern = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*$"
    )]
    pub reason: String,
}

/// The new account with what its owner needs to finish setting it up, shown this once:
/// the second factor's secret (and its `otpauth://` URL for an authenticator app) and
/// the recovery codes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StaffCreated {
    pub staff: StaffMember,
    /// The TOTP secret, base32.
    pub totp_secret: String,
    pub otpauth_url: String,
    /// Single-use codes standing in for a TOTP code; stored hashed.
    pub recovery_codes: Vec<String>,
}

/// Why a person takes an action, typed by them; kept in the audit trail.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct ActionReason {
    #[serde(default)]
    #[schema(
        max_length = 500,
        pattern = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*$"
    )]
    pub reason: Option<String>,
}

/// `GET /v1/audit`: filters, newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListAudit {
    /// Only this person's rows (their email).
    pub actor: Option<String>,
    /// Only this action (e.g. `PAYMENT_REFUNDED`).
    pub action: Option<String>,
    /// Only rows about this target (a payment id, a delivery id, an email).
    pub target: Option<String>,
    /// Rows older than this id (the previous page's `next_before`).
    pub before: Option<i64>,
    /// 1-500, default 100.
    pub limit: Option<i64>,
}

/// One row of the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// The staff member, when the actor is one.
    pub staff_id: Option<i64>,
    /// Who: the staff member's email (or the email tried, on a failed sign-in), or
    /// `service:operator` for the operator tools' service credential.
    pub actor: String,
    /// From where: the client's address as the orchestrator saw it.
    pub client_addr: Option<String>,
    pub action: AuditAction,
    pub target: Option<String>,
    pub reason: Option<String>,
    pub outcome: AuditOutcome,
    /// The refusal's code, or what a done action left (the payment's state, ...).
    pub detail: Option<String>,
}

/// A page of the audit trail.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` for the next (older) page; absent on the last one.
    pub next_before: Option<i64>,
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ApprovalState {
    /// Awaiting a second person (an admin other than the one who asked).
    Pending,
    /// Approved; the refund or the top-up was carried out.
    Approved,
    /// Rejected; nothing was refunded or deposited.
    Rejected,
}

/// A stored approval state that is none of [`ApprovalState`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown approval state {0:?}")]
pub struct UnknownApprovalState(pub String);

crate::wire_names!(
    ApprovalState { Pending => PENDING, Approved => APPROVED, Rejected => REJECTED },
    unknown: UnknownApprovalState
);

/// What an approval is of: money going out to a buyer (a refund of a payment) or money
/// paid into a member's account (a top-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ApprovalKind {
    /// A refund of a payment above `STAFF_FOUR_EYES_ABOVE`.
    Refund,
    /// A top-up above `STAFF_TOP_UP_FOUR_EYES_ABOVE`.
    TopUp,
}

/// A stored approval kind that is none of [`ApprovalKind`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown approval kind {0:?}")]
pub struct UnknownApprovalKind(pub String);

crate::wire_names!(
    ApprovalKind { Refund => REFUND, TopUp => TOP_UP },
    unknown: UnknownApprovalKind
);

/// A refund or a top-up above its limit and its approval by a second person (four
/// eyes): asked for by one person (or, for a refund, the operator tools), decided by an
/// admin who is not the one who asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Approval {
    pub id: i64,
    pub kind: ApprovalKind,
    /// The payment to refund (`REFUND`).
    pub payment_id: Option<Uuid>,
    /// The member to top up (`TOP_UP`).
    pub member_id: Option<Uuid>,
    /// The deposit's operation key (`TOP_UP`): `topup:<key>`.
    pub operation_key: Option<String>,
    /// Minor units: the payment's amount when the refund was asked for, or the
    /// top-up's.
    pub amount: i64,
    pub state: ApprovalState,
    /// The staff member who asked (absent when the operator tools asked).
    pub requested_by: Option<i64>,
    /// Who asked: their email, or `service:operator`.
    pub requested_by_name: String,
    pub requested_at: DateTime<Utc>,
    /// Why it was asked for.
    pub reason: Option<String>,
    /// The admin who approved or rejected it.
    pub decided_by: Option<i64>,
    pub decided_by_name: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    /// Why it was approved or rejected.
    pub decision_reason: Option<String>,
}

impl Approval {
    /// What it is of, in a few words: the payment or the member.
    pub fn target(&self) -> String {
        match (self.kind, self.payment_id, self.member_id) {
            (ApprovalKind::Refund, Some(p), _) => p.to_string(),
            (ApprovalKind::TopUp, _, Some(m)) => m.to_string(),
            _ => String::new(),
        }
    }
}

/// `POST /v1/payments/{id}/refund`'s answer: the payment (200), or, for a payment above
/// `STAFF_FOUR_EYES_ABOVE`, the approval a second person must give first (202).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum RefundAnswer {
    Refunded(PaymentAdmin),
    AwaitingApproval(Approval),
}

impl RefundAnswer {
    /// The payment, when the refund was carried out (or is under way).
    pub fn refunded(&self) -> Option<&PaymentAdmin> {
        match self {
            RefundAnswer::Refunded(p) => Some(p),
            RefundAnswer::AwaitingApproval(_) => None,
        }
    }

    /// The approval, when a second person must give it first.
    pub fn awaiting(&self) -> Option<&Approval> {
        match self {
            RefundAnswer::Refunded(_) => None,
            RefundAnswer::AwaitingApproval(a) => Some(a),
        }
    }
}

/// The longest top-up key: the deposit's operation key is `topup:<key>`.
pub const MAX_TOP_UP_KEY_LEN: usize = 64;

/// `POST /v1/top-ups` (admins, people only): pay `amount` into the member's account.
/// At or below `STAFF_TOP_UP_FOUR_EYES_ABOVE` it is deposited at once; above, it waits
/// for an admin other than the one asking. `key` makes it idempotent: the same key is
/// the same top-up (one deposit, `topup:<key>`, or the one approval it made).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TopUp {
    pub member_id: Uuid,
    /// Minor units, at least 1.
    #[schema(value_type = i64, minimum = 1)]
    pub amount: paysaga_common::money::Amount,
    /// Why (kept in the audit trail and on the approval); required, at most 500
    /// characters.
    pub reason: String,
    /// 1-64 characters of `[A-Za-z0-9_.:-]`, unique per top-up; reuse it on retries.
    pub key: String,
}

/// `POST /v1/top-ups`'s answer: the deposit (201, or 200 on a replay of the key), or,
/// above `STAFF_TOP_UP_FOUR_EYES_ABOVE`, the approval a second person must give first
/// (202).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum TopUpAnswer {
    Deposited(Transaction),
    AwaitingApproval(Approval),
}

impl TopUpAnswer {
    /// The deposit, when the top-up was carried out.
    pub fn deposited(&self) -> Option<&Transaction> {
        match self {
            TopUpAnswer::Deposited(t) => Some(t),
            TopUpAnswer::AwaitingApproval(_) => None,
        }
    }

    /// The approval, when a second person must give it first.
    pub fn awaiting(&self) -> Option<&Approval> {
        match self {
            TopUpAnswer::Deposited(_) => None,
            TopUpAnswer::AwaitingApproval(a) => Some(a),
        }
    }
}

/// `POST /v1/approvals/{id}/approve` and `/reject`: the decided approval, and on
/// approval what it carried out: the payment after its refund (waited for up to
/// `RESPONSE_WAIT_MS`), or the top-up's deposit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApprovalDecided {
    pub approval: Approval,
    pub payment: Option<PaymentAdmin>,
    #[serde(default)]
    pub deposit: Option<Transaction>,
}

/// `GET /v1/approvals`: filters, newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListApprovals {
    /// Only approvals in this state (`PENDING`, `APPROVED`, `REJECTED`).
    pub state: Option<String>,
    /// Only approvals of this kind (`REFUND`, `TOP_UP`).
    pub kind: Option<String>,
    /// Approvals older than this id (the previous page's `next_before`).
    pub before: Option<i64>,
    /// 1-500, default 100.
    pub limit: Option<i64>,
}

/// A page of approvals, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApprovalPage {
    pub approvals: Vec<Approval>,
    /// Pass as `before` for the next (older) page; absent on the last one.
    pub next_before: Option<i64>,
}

/// `POST /v1/products` at the orchestrator (admins): a product made by a person, who
/// says why. The orchestrator creates it at the order service and records it in the
/// audit trail.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StaffCreateProduct {
    #[serde(flatten)]
    pub product: crate::order::api::CreateProduct,
    /// Why (required, not blank; kept in the audit trail).
    #[schema(
        max_length = 500,
        min_length = 1,
        pattern = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*$"
    )]
    pub reason: String,
}

/// `POST /v1/products/{id}/units` at the orchestrator (admins): more units, and why.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StaffAddUnits {
    /// 1 to 100,000.
    #[schema(example = 50, minimum = 1, maximum = 100_000)]
    pub count: i64,
    /// Why (required, not blank; kept in the audit trail).
    #[schema(
        max_length = 500,
        min_length = 1,
        pattern = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*$"
    )]
    pub reason: String,
}
