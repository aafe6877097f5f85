//! Product and stock changes made by staff: carried to the order service under the
//! orchestrator's own credential, each one a row of the audit trail (who, why, what
//! came of it).

use paysaga_common::{
    client::{Answer, CallError},
    error::codes as common_codes,
    ApiError,
};
use paysaga_contracts::{
    order::api::{CreateProduct, ErrorCode, Product},
    staff::api::codes as staff_codes,
    OrderClient,
};
use paysaga_staff::{audit::Entry, Acting, AuditAction};
use sqlx::PgPool;

use crate::error::{Error, Result};

/// Makes products and adds units at the order service, and audits each change.
#[derive(Clone)]
pub struct Catalog {
    order: OrderClient,
    pool: PgPool,
}

/// The change an admin asks for.
pub enum Change {
    Create(CreateProduct),
    AddUnits { product: i64, count: i64 },
}

impl Change {
    /// The audit row's target before the order service has answered.
    fn target(&self) -> String {
        match self {
            Change::Create(p) => format!("product:{}", p.name.trim()),
            Change::AddUnits { product, .. } => format!("product:{product}"),
        }
    }
}

impl Catalog {
    pub fn new(order: OrderClient, pool: PgPool) -> Self {
        Self { order, pool }
    }

    /// Carries `change` out for `by`, who gave `reason` (required: a person changing
    /// what is on sale says why), and records it, whatever came of it.
    #[tracing::instrument(skip_all, fields(actor = %by.actor.name()))]
    pub async fn change(&self, by: &Acting, change: Change, reason: &str) -> Result<Product> {
        let reason = paysaga_staff::accounts::reason(Some(reason))
            .ok()
            .flatten()
            .ok_or_else(|| {
                Error::Api(ApiError::unprocessable(
                    staff_codes::REASON_INVALID,
                    "a reason is required: at most 500 characters, no control characters but tabs and line breaks",
                ))
            })?;
        let mut target = change.target();
        let answer = match &change {
            Change::Create(p) => self.order.create_product(p).await,
            Change::AddUnits { product, count } => self.order.add_units(*product, *count).await,
        };
        let result = answer.map(|a: Answer<Product>| a.body).map_err(refusal);
        if let (Ok(product), Change::Create(_)) = (&result, &change) {
            target = format!("product:{}", product.id);
        }
        let entry = Entry::of(
            AuditAction::ProductChanged,
            target,
            Some(reason),
            &result,
            |product| {
                Some(match &change {
                    Change::Create(p) => format!(
                        "created {:?}: {} units at {}",
                        p.name.trim(),
                        p.units,
                        p.price
                    ),
                    Change::AddUnits { count, .. } => {
                        format!("added {count} units ({} in all)", product.units_total)
                    }
                })
            },
            |e| e.api().map(|a| a.code),
        );
        paysaga_staff::audit::record(&self.pool, by, entry).await?;
        result
    }
}

/// The order service's answer as this service's: its refusal (a definite 4xx, with its
/// own code) passed on; no answer is 503, since the change may or may not have been
/// made (the product list says which).
fn refusal(e: CallError) -> Error {
    match &e {
        CallError::Rejected { status, body } => {
            let code = ErrorCode::parse(&body.code)
                .map(ErrorCode::as_str)
                .unwrap_or(common_codes::INVALID_BODY);
            let status = axum::http::StatusCode::from_u16(*status)
                .unwrap_or(axum::http::StatusCode::UNPROCESSABLE_ENTITY);
            Error::Api(ApiError::new(status, code, body.message.clone()))
        }
        CallError::Unknown { .. } => Error::Downstream {
            service: "order",
            source: e,
        },
    }
}
