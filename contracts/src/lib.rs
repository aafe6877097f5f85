//! The contracts between paysaga's services: for each service, the request and response
//! bodies and the stable error codes it answers with (`api`), and the typed client other
//! processes call it with (`client`). A service serves its module's types and a caller
//! uses the same definitions, so the two cannot drift; no service crate depends on
//! another. The contracts themselves are described in docs/ARCHITECTURE.md.

/// The constructors of a client that wraps one `ServiceClient` of the service
/// `$audience` (the audience of every credential it sends): a new connection pool, a
/// shared one (many buyers in a test or benchmark), or a ready `ServiceClient`.
macro_rules! service_client_constructors {
    ($client:ident, $audience:expr) => {
        impl $client {
            pub fn new(
                base: impl Into<String>,
                token: impl Into<paysaga_common::client::Credential>,
                timeout: std::time::Duration,
            ) -> Self {
                Self::from_service_client(paysaga_common::client::ServiceClient::new(
                    $audience, base, token, timeout,
                ))
            }

            pub fn with_http(
                http: reqwest::Client,
                base: impl Into<String>,
                token: impl Into<paysaga_common::client::Credential>,
            ) -> Self {
                Self::from_service_client(paysaga_common::client::ServiceClient::with_http(
                    $audience, http, base, token,
                ))
            }

            pub fn from_service_client(inner: paysaga_common::client::ServiceClient) -> Self {
                Self { inner }
            }

            pub fn base_url(&self) -> &str {
                self.inner.base_url()
            }
        }
    };
}

/// A fieldless wire enum's names, each written once as the SCREAMING_SNAKE_CASE name
/// serde gives its variant: `ALL` (every variant, in the order listed), `as_str` (the
/// wire and column form), `parse` (`None` for any other text) and `Display` (the wire
/// form). With `mod codes`, each name is also a `&str` constant of that module, for
/// callers that compare a body's `code` as text; with `unknown: Error` (a tuple struct
/// of the text), `FromStr` and `TryFrom<String>` (reading a column) refuse any other
/// text with that error.
#[macro_export]
macro_rules! wire_names {
    ($ty:ident { $($variant:ident => $name:ident),+ $(,)? }) => {
        impl $ty {
            /// Every variant, in the order of its names.
            pub const ALL: [$ty; [$(stringify!($name)),+].len()] = [$($ty::$variant),+];

            /// The wire form.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => stringify!($name)),+
                }
            }

            /// From the wire form; `None` for any other text.
            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    ($ty:ident, $(#[$meta:meta])* mod $codes:ident { $($variant:ident => $name:ident),+ $(,)? }) => {
        $crate::wire_names!($ty { $($variant => $name),+ });

        $(#[$meta])*
        pub mod $codes {
            $(pub const $name: &str = super::$ty::$variant.as_str();)+
        }
    };
    ($ty:ident { $($variant:ident => $name:ident),+ $(,)? }, unknown: $unknown:ident) => {
        $crate::wire_names!($ty { $($variant => $name),+ });

        impl std::str::FromStr for $ty {
            type Err = $unknown;
            fn from_str(s: &str) -> Result<Self, $unknown> {
                Self::parse(s).ok_or_else(|| $unknown(s.to_owned()))
            }
        }

        impl TryFrom<String> for $ty {
            type Error = $unknown;
            fn try_from(s: String) -> Result<Self, $unknown> {
                s.parse()
            }
        }
    };
}

/// The query string of those `pairs` that have a value, form-encoded in the order given
/// (e.g. `state=DEAD&limit=10`; empty when none has one).
pub fn query_string<'a>(
    pairs: impl IntoIterator<Item = (&'a str, Option<String>)>,
) -> Result<String, paysaga_common::client::CallError> {
    let mut url = reqwest::Url::parse("http://query.invalid/").map_err(|e| {
        paysaga_common::client::CallError::Unknown {
            status: None,
            reason: e.to_string(),
        }
    })?;
    url.query_pairs_mut()
        .extend_pairs(pairs.into_iter().filter_map(|(k, v)| Some((k, v?))));
    Ok(url.query().unwrap_or_default().to_owned())
}

pub mod account;
pub mod batch;
pub mod eligibility;
pub mod events;
pub mod gate;
pub mod member;
pub mod orchestrator;
pub mod order;
pub mod outbox;
pub mod schemas;
pub mod staff;

pub use account::client::AccountClient;
pub use gate::client::GateClient;
pub use member::client::MemberClient;
pub use orchestrator::client::OrchestratorClient;
pub use order::client::OrderClient;
