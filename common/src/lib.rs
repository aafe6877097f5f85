//! Shared plumbing for every paysaga service; business rules stay in their service.

/// For a newtype `$ty($inner)` that holds only what `$ty::$check` accepts: its
/// `TryFrom<$inner>` through that check (serde's `try_from`), `From<$ty>` for `$inner`
/// (serde's `into`), `Display` as the inner value, and its OpenAPI name (the schema
/// itself, what the check accepts, is the type's own `PartialSchema`).
#[macro_export]
macro_rules! checked_newtype {
    ($ty:ident($inner:ty), $check:ident, $err:ty) => {
        impl TryFrom<$inner> for $ty {
            type Error = $err;
            fn try_from(v: $inner) -> Result<Self, Self::Error> {
                Self::$check(v)
            }
        }

        impl From<$ty> for $inner {
            fn from(v: $ty) -> $inner {
                v.0
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }

        impl utoipa::ToSchema for $ty {
            fn name() -> std::borrow::Cow<'static, str> {
                stringify!($ty).into()
            }
        }
    };
}

pub mod auth;
pub mod batch;
pub mod client;
pub mod config;
pub mod credentials;
pub mod db;
pub mod deposits;
pub mod error;
pub mod extract;
pub mod jobs;
pub mod jwks;
pub mod keys;
pub mod limits;
pub mod money;
pub mod openapi;
pub mod outbox;
pub mod paging;
pub mod pass;
pub mod password;
pub mod ready;
pub mod retry;
pub mod sealing;
pub mod server;
pub mod service;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod tls;

pub use error::{ApiError, ErrorBody};
