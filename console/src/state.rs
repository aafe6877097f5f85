//! What the console's pages need, and where it reads units, the waitlist and the quota.

use std::{sync::Arc, time::Duration};

use paysaga_common::client::Credential;
use paysaga_contracts::{GateClient, OrderClient};
use paysaga_staff::Staff;
use paysaga_webhooks::Webhooks;

use crate::{desk::PaymentDesk, history::History};

/// Where the console reads units, the waitlist and the quota, and with what.
#[derive(Clone, Debug)]
pub struct ConsoleConfig {
    /// The console's own credential (role `console`, `CONSOLE_SIGNING_KEY`): it admits
    /// only the reads the drop page makes, so a signed-in operator's credential never
    /// leaves the orchestrator.
    pub credential: Credential,
    /// `ORDER_URL`: the order service.
    pub order_url: String,
    /// `GATE_URL`: the gate; `None`, the drop page says "gate not configured".
    pub gate_url: Option<String>,
    /// The roots its calls trust beside the platform's (`TLS_CA_FILE`).
    pub trust: paysaga_common::tls::Trust,
}

/// Everything the console's pages need: staff sign-in and sessions, the saga's payment desk,
/// the webhook platform, and one HTTP connection pool for calling the order service and
/// the gate with the console's own read-only credential.
#[derive(Clone)]
pub struct ConsoleState {
    pub(crate) staff: Staff,
    pub(crate) payments: Arc<dyn PaymentDesk>,
    pub(crate) webhooks: Webhooks,
    /// The drop page's samples of the figures kept nowhere over time.
    pub(crate) history: History,
    http: reqwest::Client,
    credential: Credential,
    order_url: String,
    gate_url: Option<String>,
}

impl ConsoleState {
    pub fn new(
        staff: Staff,
        payments: Arc<dyn PaymentDesk>,
        webhooks: Webhooks,
        config: ConsoleConfig,
    ) -> Self {
        Self {
            staff,
            payments,
            webhooks,
            history: History::default(),
            // Short: a page waits on these reads, and a downstream that does not answer
            // is shown as unreachable rather than holding the page.
            http: paysaga_common::client::http_client_trusting(
                Duration::from_secs(2),
                &config.trust,
            ),
            credential: config.credential,
            order_url: config.order_url,
            gate_url: config.gate_url,
        }
    }

    pub(crate) fn order(&self) -> OrderClient {
        OrderClient::with_http(self.http.clone(), &self.order_url, &self.credential)
    }

    pub(crate) fn gate(&self) -> Option<GateClient> {
        self.gate_url
            .as_ref()
            .map(|url| GateClient::with_http(self.http.clone(), url, &self.credential))
    }
}
