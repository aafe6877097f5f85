//! The contracts between paysaga's services: for each service, the request and response
//! bodies and the stable error codes it answers with (`api`), and the typed client other
//! processes call it with (`client`). A service serves its module's types and a caller
//! uses the same definitions, so the two cannot drift; no service crate depends on
//! another. The contracts themselves are described in docs/ARCHITECTURE.md.

pub mod account;
pub mod batch;
pub mod events;
pub mod gate;
pub mod member;
pub mod orchestrator;
pub mod order;

pub use account::client::AccountClient;
pub use gate::client::GateClient;
pub use member::client::MemberClient;
pub use orchestrator::client::OrchestratorClient;
pub use order::client::OrderClient;
