//! Buyer-token keys as a JSON Web Key Set: what the member service publishes, and the
//! cached copy every other service verifies buyer tokens against.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use ed25519_dalek::VerifyingKey;
use jsonwebtoken::DecodingKey;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

/// Where the member service publishes its keys.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

/// One public key (RFC 8037: `kty` OKP, `crv` Ed25519, `x` the raw key in base64url).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Jwk {
    pub kty: String,
    pub crv: String,
    pub x: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    #[serde(default, rename = "use", skip_serializing_if = "Option::is_none")]
    pub key_use: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
}

/// A key set: `{"keys": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct JwkSet {
    pub keys: Vec<Jwk>,
}

/// A key's id: its RFC 7638 thumbprint (SHA-256 over the canonical members, base64url).
/// Derived from the key itself, so a rotation needs no second setting to keep in step.
pub fn kid_of(key: &VerifyingKey) -> String {
    let x = URL_SAFE_NO_PAD.encode(key.as_bytes());
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

impl Jwk {
    /// The public half of an Ed25519 signing key, with its thumbprint as `kid`.
    pub fn ed25519(key: &VerifyingKey) -> Self {
        Self {
            kty: "OKP".into(),
            crv: "Ed25519".into(),
            x: URL_SAFE_NO_PAD.encode(key.as_bytes()),
            kid: Some(kid_of(key)),
            key_use: Some("sig".into()),
            alg: Some("EdDSA".into()),
        }
    }

    /// The key, if this is a well-formed Ed25519 signing key.
    pub fn verifying_key(&self) -> Option<VerifyingKey> {
        if self.kty != "OKP" || self.crv != "Ed25519" {
            return None;
        }
        if self.key_use.as_deref().is_some_and(|u| u != "sig") {
            return None;
        }
        if self.alg.as_deref().is_some_and(|a| a != "EdDSA") {
            return None;
        }
        let bytes: [u8; 32] = URL_SAFE_NO_PAD.decode(&self.x).ok()?.try_into().ok()?;
        VerifyingKey::from_bytes(&bytes).ok()
    }
}

impl JwkSet {
    /// The set publishing `keys`, in the order given (current key first).
    pub fn of(keys: &[VerifyingKey]) -> Self {
        Self {
            keys: keys.iter().map(Jwk::ed25519).collect(),
        }
    }

    /// Usable keys by id. A key whose `kid` is missing or does not match its thumbprint
    /// is skipped: tokens name keys by thumbprint, so such an entry could only confuse.
    pub fn by_kid(&self) -> HashMap<String, VerifyingKey> {
        self.keys
            .iter()
            .filter_map(|jwk| {
                let key = jwk.verifying_key()?;
                let kid = kid_of(&key);
                (jwk.kid.as_deref() == Some(kid.as_str())).then_some((kid, key))
            })
            .collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("fetching the key set: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the key set holds no usable Ed25519 key")]
    Empty,
}

/// The member service's keys as this process last fetched them. Lookups never wait
/// on the network; a fetch replaces the set only when it succeeds, so verification
/// goes on with the last good keys while the member service is down.
pub struct RemoteKeys {
    url: String,
    http: reqwest::Client,
    keys: RwLock<Arc<HashMap<String, DecodingKey>>>,
    /// When the last fetch asked for by an unknown `kid` began.
    last_on_demand: Mutex<Option<Instant>>,
    /// One fetch at a time; callers that arrive during one wait for its result.
    fetching: tokio::sync::Mutex<()>,
    min_interval: Duration,
}

impl RemoteKeys {
    /// Keys from `url` (the member service's JWKS), over TLS trusting `trust` beside the
    /// platform's roots when the URL is `https://`. An unknown `kid` triggers a fetch
    /// at most once per `min_interval`, so made-up ids cannot flood the member service.
    pub fn new(
        url: impl Into<String>,
        min_interval: Duration,
        trust: &crate::tls::Trust,
    ) -> Arc<Self> {
        Arc::new(Self {
            url: url.into(),
            http: crate::client::http_client_trusting(Duration::from_secs(5), trust),
            keys: RwLock::new(Arc::new(HashMap::new())),
            last_on_demand: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
            min_interval,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    fn read(&self) -> Arc<HashMap<String, DecodingKey>> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The key named `kid`, from what is held.
    pub fn get(&self, kid: &str) -> Option<DecodingKey> {
        self.read().get(kid).cloned()
    }

    /// Fetches the set now and replaces what is held; on failure keeps it.
    pub async fn refresh(&self) -> Result<usize, FetchError> {
        let _one = self.fetching.lock().await;
        self.fetch_and_store().await
    }

    async fn fetch_and_store(&self) -> Result<usize, FetchError> {
        let set: JwkSet = self
            .http
            .get(&self.url)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let keys: HashMap<String, DecodingKey> = set
            .by_kid()
            .into_iter()
            .map(|(kid, key)| (kid, crate::auth::decoding_key(&key)))
            .collect();
        if keys.is_empty() {
            return Err(FetchError::Empty);
        }
        let n = keys.len();
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
        metrics::gauge!("paysaga_jwks_keys").set(n as f64);
        Ok(n)
    }

    /// The key named `kid`, fetching the set first if it is unknown and no on-demand
    /// fetch began within `min_interval`. A caller first waits for a fetch already in
    /// flight (the start's, or another caller's): many buyers arriving at once with a
    /// key this process has not seen yet (a restart, a rotation) get it from that one
    /// fetch instead of being refused meanwhile.
    pub async fn get_or_fetch(&self, kid: &str) -> Option<DecodingKey> {
        if let Some(key) = self.get(kid) {
            return Some(key);
        }
        let _one = self.fetching.lock().await;
        // A fetch that finished while this caller waited may already hold the key.
        if let Some(key) = self.get(kid) {
            return Some(key);
        }
        {
            let mut last = self
                .last_on_demand
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < self.min_interval) {
                metrics::counter!("paysaga_jwks_fetches_total", "outcome" => "throttled")
                    .increment(1);
                return None;
            }
            *last = Some(Instant::now());
        }
        let outcome = match self.fetch_and_store().await {
            Ok(_) => "ok",
            Err(e) => {
                tracing::warn!(url = %self.url, error = %e, "fetching buyer-token keys for an unknown kid failed");
                "failed"
            }
        };
        metrics::counter!("paysaga_jwks_fetches_total", "outcome" => outcome).increment(1);
        self.get(kid)
    }

    /// Fetches once now, waiting at most `first_wait` for a first success (retrying each
    /// half second), then keeps refreshing every `every` in a background task; failures
    /// are logged and the held keys stay. Returns whether keys are held.
    pub async fn start(self: &Arc<Self>, first_wait: Duration, every: Duration) -> bool {
        let deadline = Instant::now() + first_wait;
        loop {
            match self.refresh().await {
                Ok(n) => {
                    tracing::info!(url = %self.url, keys = n, "buyer-token keys fetched");
                    break;
                }
                Err(e) if Instant::now() >= deadline => {
                    tracing::warn!(url = %self.url, error = %e, "no buyer-token keys yet; buyer tokens are refused until a fetch succeeds");
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let pause = match weak.upgrade() {
                    Some(keys) if keys.is_empty() => Duration::from_secs(1),
                    Some(_) => every,
                    None => return,
                };
                tokio::time::sleep(pause).await;
                let Some(keys) = weak.upgrade() else { return };
                if let Err(e) = keys.refresh().await {
                    tracing::warn!(url = %keys.url, error = %e, "refreshing buyer-token keys failed; keeping the last good set");
                }
            }
        });
        !self.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::SigningKey;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_with_an_unknown_kid_wait_for_the_one_fetch_in_flight() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let key = SigningKey::from_bytes(&[3; 32]).verifying_key();
        let set = JwkSet::of(&[key]);
        let kid = set.by_kid().into_keys().next().expect("a kid");
        let served = Arc::new(AtomicUsize::new(0));
        let count = served.clone();
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let (set, count) = (set.clone(), count.clone());
                async move {
                    count.fetch_add(1, Ordering::SeqCst);
                    // Slow enough that every caller arrives while it is in flight.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    axum::Json(set)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let keys = RemoteKeys::new(url, Duration::from_secs(60), &Default::default());
        let callers = (0..20).map(|_| {
            let (keys, kid) = (keys.clone(), kid.clone());
            tokio::spawn(async move { keys.get_or_fetch(&kid).await.is_some() })
        });
        for found in futures::future::join_all(callers).await {
            assert!(
                found.unwrap(),
                "a caller was refused while the fetch was in flight"
            );
        }
        assert_eq!(
            served.load(Ordering::SeqCst),
            1,
            "one fetch for all of them"
        );
    }

    #[test]
    fn a_published_set_reads_back_by_thumbprint() {
        let a = SigningKey::from_bytes(&[1; 32]).verifying_key();
        let b = SigningKey::from_bytes(&[2; 32]).verifying_key();
        let set = JwkSet::of(&[a, b]);
        let json = serde_json::to_string(&set).unwrap();
        assert!(json.contains(r#""use":"sig""#) && json.contains(r#""crv":"Ed25519""#));
        let back: JwkSet = serde_json::from_str(&json).unwrap();
        let keys = back.by_kid();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[&kid_of(&a)], a);
        assert_ne!(kid_of(&a), kid_of(&b));
    }

    #[test]
    fn entries_that_are_not_ed25519_signing_keys_or_misnamed_are_skipped() {
        let a = SigningKey::from_bytes(&[1; 32]).verifying_key();
        let mut wrong_kid = Jwk::ed25519(&a);
        wrong_kid.kid = Some("not-its-thumbprint".into());
        let mut enc = Jwk::ed25519(&a);
        enc.key_use = Some("enc".into());
        let mut rsa = Jwk::ed25519(&a);
        rsa.kty = "RSA".into();
        let mut short = Jwk::ed25519(&a);
        short.x = "AAAA".into();
        let set = JwkSet {
            keys: vec![wrong_kid, enc, rsa, short],
        };
        assert!(set.by_kid().is_empty());
    }

    #[test]
    fn the_thumbprint_matches_rfc_8037_appendix_a3() {
        // RFC 8037 A.3: the thumbprint of its example key.
        let x = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
        let bytes: [u8; 32] = URL_SAFE_NO_PAD.decode(x).unwrap().try_into().unwrap();
        let key = VerifyingKey::from_bytes(&bytes).unwrap();
        assert_eq!(kid_of(&key), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
    }
}
