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

pub mod account;
pub mod batch;
pub mod eligibility;
pub mod events;
pub mod gate;
pub mod member;
pub mod orchestrator;
pub mod order;
pub mod outbox;

pub use account::client::AccountClient;
pub use gate::client::GateClient;
pub use member::client::MemberClient;
pub use orchestrator::client::OrchestratorClient;
pub use order::client::OrderClient;
