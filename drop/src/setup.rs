//! Setting up a drop through the services' own APIs: a product with its units, buyers
//! signed up and in through the member service with their accounts funded, and waiting
//! until the gate's quota knows the product.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use paysaga_common::{
    auth::ServiceRole,
    client::{Credential, ServiceClient},
    credentials::TokenSource,
};
use paysaga_contracts::account::client::AccountClient;
use paysaga_contracts::eligibility::EligibilityRule;
use paysaga_contracts::gate::client::GateClient;
use paysaga_contracts::member::{
    api::{BulkMember, BulkSignUpRequest, Member},
    client::MemberClient,
};
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
    pub token: Credential,
}

impl Admin {
    /// The operator of a development system (services running with
    /// `PAYSAGA_DEV_KEYS=1`, as every system the supervisor wires does): credentials of
    /// the `operator` role minted and renewed with its public development key, which
    /// only such a system accepts, and only on its operator routes.
    pub fn new(endpoints: Endpoints, http: reqwest::Client) -> Self {
        Self {
            endpoints,
            http,
            token: TokenSource::development(ServiceRole::Operator).into(),
        }
    }

    pub fn order(&self) -> OrderClient {
        OrderClient::with_http(self.http.clone(), &self.endpoints.order, &self.token)
    }

    pub fn account(&self) -> AccountClient {
        AccountClient::from_service_client(ServiceClient::with_http(
            paysaga_common::auth::Audience::Account,
            self.http.clone(),
            &self.endpoints.account,
            &self.token,
        ))
    }

    /// Releases the hold of reservation `id` as an operator may (the money of a
    /// reservation the operator judges abandoned): its payment's debit is then declined
    /// `HOLD_RELEASED`, and the reservation released with it. Tests use it to make a
    /// payment fail.
    pub async fn release_hold(&self, reservation_id: uuid::Uuid) -> anyhow::Result<()> {
        let key = paysaga_contracts::order::api::hold_key(reservation_id);
        self.account()
            .release_hold(&key)
            .await
            .with_context(|| format!("releasing hold {key}"))?;
        Ok(())
    }

    pub fn member(&self) -> MemberClient {
        MemberClient::new(&self.endpoints.member, &self.token, Duration::from_secs(60))
    }

    pub fn gate(&self) -> GateClient {
        GateClient::with_http(self.http.clone(), &self.endpoints.gate, &self.token)
    }

    /// Creates a product with `units` units at `price` minor units each, held by a
    /// reservation for the order service's `RESERVATION_TTL_SECS`.
    pub async fn create_product(
        &self,
        name: &str,
        price: i64,
        units: i64,
    ) -> anyhow::Result<Product> {
        self.create_product_holding(name, price, units, None).await
    }

    /// [`Admin::create_product`] with the product's own reservation hold time, seconds.
    pub async fn create_product_holding(
        &self,
        name: &str,
        price: i64,
        units: i64,
        reservation_ttl_secs: Option<u32>,
    ) -> anyhow::Result<Product> {
        self.create(CreateProduct {
            name: name.to_owned(),
            price,
            units,
            reservation_ttl_secs,
            eligibility: Vec::new(),
        })
        .await
    }

    /// [`Admin::create_product`] for the members `eligibility` admits (e.g. accounts
    /// created before the drop's announcement).
    pub async fn create_product_for(
        &self,
        name: &str,
        price: i64,
        units: i64,
        eligibility: Vec<EligibilityRule>,
    ) -> anyhow::Result<Product> {
        self.create(CreateProduct {
            name: name.to_owned(),
            price,
            units,
            reservation_ttl_secs: None,
            eligibility,
        })
        .await
    }

    async fn create(&self, req: CreateProduct) -> anyhow::Result<Product> {
        Ok(self
            .order()
            .create_product(&req)
            .await
            .context("creating the product")?
            .body)
    }

    /// A buyer named `name`: signed up through the member service's seeding route (which
    /// opens the account with `balance` as its opening deposit: top-ups are staff
    /// actions, each authorized by the orchestrator, so seeding pays money in at the
    /// opening instead), with a signed-in session for a buyer token. Asking again for a
    /// name already signed up signs it in again and pays nothing twice.
    pub async fn open_buyer(&self, name: &str, balance: i64) -> anyhow::Result<Buyer> {
        let req = BulkSignUpRequest {
            password: BUYER_PASSWORD.to_owned(),
            members: vec![BulkMember {
                email: buyer_email(name),
            }],
            opening_balance: Some(balance),
        };
        // An account the account service could not open yet (slow or restarting) is
        // opened by the same request again.
        let mut attempt = 0;
        let seeded = loop {
            attempt += 1;
            let mut answer = self
                .member()
                .bulk_sign_up(&req)
                .await
                .with_context(|| format!("signing {name} up"))?
                .body;
            let seeded = answer
                .members
                .pop()
                .with_context(|| format!("no member answered for {name}"))?;
            if seeded.member.account_id.is_some() || attempt >= OPEN_ACCOUNT_ATTEMPTS {
                break seeded;
            }
            tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
        };
        let member: Member = seeded.member;
        let account_id = member
            .account_id
            .with_context(|| format!("member {} has no account yet", member.id))?;
        Ok(Buyer {
            member: member.id.to_string(),
            account_id,
            balance,
            token: seeded.session.access_token,
        })
    }

    /// `balances.len()` buyers named `<prefix>-<i>`, seeded in bulk through the member
    /// service (one Argon2 hash for all of them, each with its own account and a signed-in
    /// session), `parallel` requests at a time. Buyers with the same balance share a
    /// request; the balance is each account's opening deposit.
    pub async fn open_buyers(
        &self,
        prefix: &str,
        balances: &[i64],
        parallel: usize,
    ) -> anyhow::Result<Vec<Buyer>> {
        use futures::{StreamExt, TryStreamExt};
        let mut groups: std::collections::BTreeMap<i64, Vec<usize>> = Default::default();
        for (i, &b) in balances.iter().enumerate() {
            groups.entry(b).or_default().push(i);
        }
        let requests: Vec<(i64, Vec<usize>)> = groups
            .into_iter()
            .flat_map(|(b, idx)| {
                idx.chunks(1_000)
                    .map(|c| (b, c.to_vec()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let seeded: Vec<Vec<(usize, Buyer)>> = futures::stream::iter(requests)
            .map(|(balance, idx)| async move {
                let req = BulkSignUpRequest {
                    password: BUYER_PASSWORD.to_owned(),
                    members: idx
                        .iter()
                        .map(|i| BulkMember {
                            email: buyer_email(&format!("{prefix}-{i}")),
                        })
                        .collect(),
                    opening_balance: Some(balance),
                };
                // The member service answers a member whose account could not be opened
                // yet (the account service slow or restarting) without an account id;
                // the same request again completes those accounts, as a client would.
                let mut attempt = 0;
                let answer = loop {
                    attempt += 1;
                    let answer = self
                        .member()
                        .bulk_sign_up(&req)
                        .await
                        .with_context(|| format!("seeding {} buyers", idx.len()))?
                        .body;
                    let pending = answer.members.iter().any(|m| m.member.account_id.is_none());
                    if !pending || attempt >= OPEN_ACCOUNT_ATTEMPTS {
                        break answer;
                    }
                    tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                };
                anyhow::ensure!(
                    answer.members.len() == idx.len(),
                    "asked for {} buyers, got {}",
                    idx.len(),
                    answer.members.len()
                );
                idx.iter()
                    .zip(answer.members)
                    .map(|(&i, m)| {
                        Ok((
                            i,
                            Buyer {
                                member: m.member.id.to_string(),
                                account_id: m.member.account_id.with_context(|| {
                                    format!("member {} has no account yet", m.member.id)
                                })?,
                                balance,
                                token: m.session.access_token,
                            },
                        ))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()
            })
            .buffered(parallel.max(1))
            .try_collect()
            .await?;
        let mut buyers: Vec<Option<Buyer>> = vec![None; balances.len()];
        for (i, b) in seeded.into_iter().flatten() {
            buyers[i] = Some(b);
        }
        buyers
            .into_iter()
            .map(|b| b.context("a buyer was not seeded"))
            .collect()
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

/// How often a bulk sign-up is sent while some of its members still have no account.
const OPEN_ACCOUNT_ATTEMPTS: u64 = 10;

/// DEVELOPMENT ONLY: the password every buyer opened here signs up with.
pub const BUYER_PASSWORD: &str = "harness-buyer-DEVELOPMENT-password";

/// The email a buyer named `name` opened here signs up with.
pub fn buyer_email(name: &str) -> String {
    format!("{}@buyers.paysaga.test", name.to_ascii_lowercase())
}
