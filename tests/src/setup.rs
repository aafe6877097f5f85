//! Setting up a drop through the services' own APIs: a product with its units, buyer
//! accounts with opening balances, and waiting until the gate's quota knows the product.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use paysaga_common::{auth::MemberId, client::ServiceClient, testkit};
use paysaga_contracts::account::{api::OpenAccountRequest, client::AccountClient};
use paysaga_contracts::gate::client::GateClient;
use paysaga_contracts::order::{
    api::{CreateProduct, Product},
    client::OrderClient,
};

use crate::buyer::{Buyer, Endpoints};

/// Service-credentialed clients for setting up and inspecting a drop.
#[derive(Clone, Debug)]
pub struct Admin {
    pub endpoints: Endpoints,
    pub http: reqwest::Client,
    pub token: String,
}

impl Admin {
    /// An operator with a development service credential named `name`.
    pub fn new(endpoints: Endpoints, http: reqwest::Client, name: &str) -> Self {
        Self {
            endpoints,
            http,
            token: testkit::service_token(name),
        }
    }

    pub fn order(&self) -> OrderClient {
        OrderClient::with_http(self.http.clone(), &self.endpoints.order, &self.token)
    }

    pub fn account(&self) -> AccountClient {
        AccountClient::from_service_client(ServiceClient::with_http(
            self.http.clone(),
            &self.endpoints.account,
            &self.token,
        ))
    }

    pub fn gate(&self) -> GateClient {
        GateClient::with_http(self.http.clone(), &self.endpoints.gate, &self.token)
    }

    /// Creates a product with `units` units at `price` minor units each.
    pub async fn create_product(
        &self,
        name: &str,
        price: i64,
        units: i64,
    ) -> anyhow::Result<Product> {
        let req = CreateProduct {
            name: name.to_owned(),
            price,
            units,
        };
        Ok(self
            .order()
            .create_product(&req)
            .await
            .context("creating the product")?
            .body)
    }

    /// Opens an account for `member` holding `balance` minor units, with a buyer token.
    pub async fn open_buyer(&self, member: &str, balance: i64) -> anyhow::Result<Buyer> {
        let member_id = MemberId::parse(member).map_err(|e| anyhow::anyhow!("{member}: {e}"))?;
        let req = OpenAccountRequest {
            member_id,
            opening_balance: balance,
            open_key: None,
        };
        let account = self
            .account()
            .open_account(&req)
            .await
            .with_context(|| format!("opening an account for {member}"))?
            .body;
        Ok(Buyer {
            member: member.to_owned(),
            account_id: account.id,
            balance,
            token: testkit::buyer_token(member),
        })
    }

    /// Opens `balances.len()` buyer accounts named `<prefix>-<i>`, `parallel` at a time.
    pub async fn open_buyers(
        &self,
        prefix: &str,
        balances: &[i64],
        parallel: usize,
    ) -> anyhow::Result<Vec<Buyer>> {
        use futures::{StreamExt, TryStreamExt};
        futures::stream::iter(balances.iter().enumerate())
            .map(|(i, &balance)| async move { self.open_buyer(&format!("{prefix}-{i}"), balance).await })
            .buffered(parallel.max(1))
            .try_collect()
            .await
    }

    /// Waits until the gate's shared quota for `product_id` is `expected` (the gate
    /// learns new products and stock from its recompute job).
    pub async fn wait_for_quota(
        &self,
        product_id: i64,
        expected: i64,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.gate().quota(product_id).await {
                Ok(a) if a.body.quota == expected => return Ok(()),
                Ok(a) => format!("quota {} in flight {}", a.body.quota, a.body.in_flight),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                bail!("the gate's quota for product {product_id} did not reach {expected} within {timeout:?} (last: {last})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
