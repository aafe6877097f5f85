//! Identity: buyer JWTs (subject = member id) and service credentials, verified with
//! Ed25519 public keys, exposed to handlers as extractors.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{
    extract::{FromRef, FromRequestParts},
    http::{header::AUTHORIZATION, request::Parts},
};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use ed25519_dalek::{pkcs8::EncodePrivateKey, SigningKey, VerifyingKey};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{
    config::{self, ConfigError, Secrets},
    credentials::{ServiceKeys, MAX_SERVICE_TOKEN_LIFETIME_SECS},
    error::{codes, ApiError},
    jwks::{self, RemoteKeys},
    keys::{self, DevKey},
};

pub const ISSUER: &str = "paysaga";
pub const BUYER_AUDIENCE: &str = "paysaga:buyer";

/// The one service a service credential is for: its `aud` claim, `paysaga:<service>`.
/// Each verifier admits only credentials naming its own service, so a credential a
/// caller sent to one service opens nothing at any other; a caller mints one per
/// destination ([`crate::credentials::TokenSource::token`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Audience {
    Account,
    Order,
    Gate,
    Orchestrator,
    Member,
}

impl Audience {
    pub const ALL: [Audience; 5] = [
        Audience::Account,
        Audience::Order,
        Audience::Gate,
        Audience::Orchestrator,
        Audience::Member,
    ];

    /// The service's name (`account`, `order`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Audience::Account => "account",
            Audience::Order => "order",
            Audience::Gate => "gate",
            Audience::Orchestrator => "orchestrator",
            Audience::Member => "member",
        }
    }

    /// The `aud` claim of a credential for this service.
    pub const fn claim(self) -> &'static str {
        match self {
            Audience::Account => "paysaga:account",
            Audience::Order => "paysaga:order",
            Audience::Gate => "paysaga:gate",
            Audience::Orchestrator => "paysaga:orchestrator",
            Audience::Member => "paysaga:member",
        }
    }

    /// The service a name (`account`, ...) or a claim (`paysaga:account`) names.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.name() == s || a.claim() == s)
    }

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Audience {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The longest a buyer token may live (`exp - iat`). The member service issues
/// 15-minute tokens; a leaked key or a mis-set minter must not yield tokens that stay
/// good for years.
pub const MAX_BUYER_TOKEN_LIFETIME_SECS: i64 = 24 * 3600;

/// A member (buyer) id: the subject of a buyer token. 1 to 64 characters of
/// `[A-Za-z0-9_.:-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MemberId(String);

/// The schema states what [`MemberId::parse`] accepts.
impl utoipa::PartialSchema for MemberId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(64))
            .pattern(Some("^[A-Za-z0-9_.:-]{1,64}$"))
            .examples(["member-42"])
            .into()
    }
}

impl MemberId {
    pub fn parse(s: impl Into<String>) -> Result<Self, &'static str> {
        let s = s.into();
        let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
        if s.is_empty() || s.len() > 64 || !s.chars().all(ok_char) {
            return Err("member id must be 1-64 characters of [A-Za-z0-9_.:-]");
        }
        Ok(Self(s))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

crate::checked_newtype!(MemberId(String), parse, &'static str);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub aud: String,
    pub iss: String,
    pub iat: i64,
    pub exp: i64,
    /// Not valid before (unix seconds). Every token minted here carries it; service
    /// credentials must.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    /// Buyer tokens: whether the member's email is verified (OpenID Connect's
    /// `email_verified`), as the member service knew it when it signed the token.
    /// Absent: not verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email_verified: Option<bool>,
}

/// What a verified buyer token says of its member: who, and whether their email is
/// verified (so a rule on it is judged without a call to the member service).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuyerIdentity {
    pub member: MemberId,
    pub email_verified: bool,
}

/// Where buyer-token keys come from.
#[derive(Debug, Clone)]
pub enum BuyerKeySource {
    /// One fixed public key (`JWT_PUBLIC_KEY`); tokens need no `kid`.
    Static(VerifyingKey),
    /// The member service's key set (`MEMBER_JWKS_URL`); tokens must name their key by
    /// `kid`. An unknown `kid` fetches the set again at most once per `min_refresh`;
    /// the set is also refreshed every `refresh_every`. Over `https://` the member
    /// service's certificate is verified against the platform's roots and `trust`'s
    /// (`TLS_CA_FILE`).
    Jwks {
        url: String,
        min_refresh: std::time::Duration,
        refresh_every: std::time::Duration,
        trust: crate::tls::Trust,
    },
}

impl BuyerKeySource {
    /// `MEMBER_JWKS_URL` when set (with `JWKS_MIN_REFRESH_MS`, default 5000,
    /// `JWKS_REFRESH_SECS`, default 300, and `TLS_CA_FILE`), else `JWT_PUBLIC_KEY`; with
    /// neither, the development key in development mode, else missing. Outside
    /// development mode the key set is fetched over `https://` ([`jwks_url`]).
    pub fn from_secrets(secrets: &mut Secrets) -> Result<Self, ConfigError> {
        match std::env::var("MEMBER_JWKS_URL") {
            Ok(url) if !url.trim().is_empty() => {
                let every: u64 = crate::config::parse("JWKS_REFRESH_SECS", 300)?;
                Ok(Self::Jwks {
                    url: jwks_url(url.trim(), secrets.is_dev())?,
                    min_refresh: crate::config::millis(
                        "JWKS_MIN_REFRESH_MS",
                        std::time::Duration::from_secs(5),
                    )?,
                    refresh_every: std::time::Duration::from_secs(every.max(1)),
                    trust: crate::tls::Trust::from_env()?,
                })
            }
            _ => match std::env::var("JWT_PUBLIC_KEY") {
                Ok(v) if !v.trim().is_empty() => Ok(Self::Static(keys::verifying_key(
                    secrets,
                    "JWT_PUBLIC_KEY",
                    DevKey::BuyerTokens,
                )?)),
                _ => {
                    secrets.unset("MEMBER_JWKS_URL or JWT_PUBLIC_KEY");
                    Ok(Self::development())
                }
            },
        }
    }

    /// The development buyer key.
    pub fn development() -> Self {
        Self::Static(DevKey::BuyerTokens.verifying_key())
    }
}

/// `MEMBER_JWKS_URL` as a key set may be fetched from: `https://`, or `http://` to a
/// loopback host (`localhost`, 127.0.0.0/8, `::1`: the connection never leaves the
/// machine), or any `http://` in development mode. Whoever can change the keys in
/// flight can mint buyer tokens every service accepts, so a plain `http://` across a
/// network is refused when the service starts.
pub fn jwks_url(url: &str, dev_mode: bool) -> Result<String, ConfigError> {
    const VAR: &str = "MEMBER_JWKS_URL";
    let refused = |reason: &str| ConfigError {
        name: VAR.to_owned(),
        value: url.to_owned(),
        reason: reason.to_owned(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| refused(&format!("not a URL: {e}")))?;
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| refused("a host is required"))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "https" => Ok(url.to_owned()),
        "http" if loopback || dev_mode => Ok(url.to_owned()),
        "http" => Err(refused(&format!(
            "buyer-token keys must be fetched over https:// (plain http:// only to a \
             loopback host, or with {}=1 for development)",
            crate::config::DEV_KEYS_VAR
        ))),
        other => Err(refused(&format!("expected https://, not {other}://"))),
    }
}

#[derive(Clone)]
enum BuyerKeys {
    Static(DecodingKey),
    Remote(Arc<RemoteKeys>),
}

/// Verifies both kinds of token. Buyer and service tokens use different keys and
/// audiences, so one can never stand in for the other; each service credential is
/// checked under the key its `kid` names, which must be registered for the role its
/// `sub` names, and must name this verifier's own service as its audience.
#[derive(Clone)]
pub struct Verifier {
    audience: Audience,
    buyer_keys: BuyerKeys,
    service_keys: Arc<HashMap<String, (ServiceRole, DecodingKey)>>,
    buyer_validation: Validation,
    service_validation: Validation,
    buyer_cache: Option<Arc<TokenCache<BuyerIdentity>>>,
    /// Always on: a caller sends one credential for its whole lifetime, batch after
    /// batch, so without it every internal request paid an Ed25519 check.
    service_cache: Arc<TokenCache<ServiceRole>>,
}

/// How many verified service credentials are remembered: a few per calling instance.
const SERVICE_CACHE_CAPACITY: usize = 256;

/// A bounded memory of tokens that passed full verification. During a drop a buyer's
/// retries carry the same token, and a service sends the same credential with every
/// batch: its Ed25519 signature need not be checked again until it expires. Keyed by
/// the SHA-256 of the whole token: two tokens share an entry only through a SHA-256
/// collision, so it never accepts anything the verifier would refuse, and an entry
/// takes 32 bytes for its key rather than the token's few hundred (a drop of 100,000
/// buyers fills the gate's cache). It honours `exp` without the verifier's leeway.
struct TokenCache<V> {
    shards: Vec<Mutex<CacheShard<V>>>,
    per_shard: usize,
}

const CACHE_SHARDS: usize = 16;

/// A token's cache key: its SHA-256.
type TokenDigest = [u8; 32];

/// Verified token's digest -> (who it names, expiry in unix seconds).
type CacheShard<V> = HashMap<TokenDigest, (V, i64)>;

impl<V: Clone> TokenCache<V> {
    fn new(capacity: usize) -> Self {
        Self {
            shards: (0..CACHE_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            per_shard: capacity.div_ceil(CACHE_SHARDS),
        }
    }

    fn digest(token: &str) -> TokenDigest {
        Sha256::digest(token.as_bytes()).into()
    }

    /// The digest's shard: its bytes are uniform, whoever chose the token.
    fn shard(&self, digest: &TokenDigest) -> std::sync::MutexGuard<'_, CacheShard<V>> {
        let i = usize::from(digest[0]) % CACHE_SHARDS;
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, token: &str, now: i64) -> Option<V> {
        let digest = Self::digest(token);
        self.shard(&digest)
            .get(&digest)
            .filter(|(_, exp)| *exp > now)
            .map(|(m, _)| m.clone())
    }

    fn insert(&self, token: &str, member: &V, exp: i64, now: i64) {
        if exp <= now {
            return;
        }
        let digest = Self::digest(token);
        let mut shard = self.shard(&digest);
        if shard.len() >= self.per_shard {
            shard.retain(|_, (_, e)| *e > now);
            if shard.len() >= self.per_shard {
                // Full of live tokens: start the shard over rather than track recency.
                shard.clear();
            }
        }
        shard.insert(digest, (member.clone(), exp));
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }
}

pub(crate) fn decoding_key(k: &VerifyingKey) -> DecodingKey {
    DecodingKey::from_ed_components(&URL_SAFE_NO_PAD.encode(k.as_bytes()))
        .expect("a 32-byte Ed25519 key always encodes")
}

fn validation(aud: &str) -> Validation {
    let mut v = Validation::new(Algorithm::EdDSA);
    v.set_audience(&[aud]);
    v.set_issuer(&[ISSUER]);
    v.set_required_spec_claims(&["exp", "sub", "aud", "iss"]);
    v.validate_nbf = true;
    v.leeway = 5;
    v
}

/// How every buyer token is checked, here and in the member service: EdDSA, the buyer
/// audience, our issuer, `nbf` when present, and `iat` required (for the lifetime cap).
pub fn buyer_validation() -> Validation {
    let mut v = validation(BUYER_AUDIENCE);
    v.set_required_spec_claims(&["exp", "iat", "sub", "aud", "iss"]);
    v
}

/// Whether a verified buyer token's lifetime is within [`MAX_BUYER_TOKEN_LIFETIME_SECS`].
pub fn within_buyer_lifetime(claims: &Claims) -> bool {
    claims.exp.saturating_sub(claims.iat) <= MAX_BUYER_TOKEN_LIFETIME_SECS
}

/// How every service credential for `audience` is checked: EdDSA, that one service as
/// the audience (a credential for any other service is refused), our issuer, `iat`
/// (for the lifetime cap) and `nbf` required.
pub fn service_validation(audience: Audience) -> Validation {
    let mut v = validation(audience.claim());
    v.set_required_spec_claims(&["exp", "nbf", "iat", "sub", "aud", "iss"]);
    v
}

impl Verifier {
    /// The verifier of the service `audience`: it admits service credentials made for
    /// that service only.
    pub fn new(buyer: &VerifyingKey, service: &ServiceKeys, audience: Audience) -> Self {
        Self {
            audience,
            buyer_keys: BuyerKeys::Static(decoding_key(buyer)),
            service_keys: Arc::new(
                service
                    .iter()
                    .map(|(kid, role, key)| (kid.to_owned(), (role, decoding_key(key))))
                    .collect(),
            ),
            buyer_validation: buyer_validation(),
            service_validation: service_validation(audience),
            buyer_cache: None,
            service_cache: Arc::new(TokenCache::new(SERVICE_CACHE_CAPACITY)),
        }
    }

    /// Remembers up to `capacity` verified buyer tokens (0: none), shared by every clone
    /// of this verifier. Worth it where buyer requests dominate (the gate).
    pub fn with_buyer_cache(mut self, capacity: usize) -> Self {
        self.buyer_cache = (capacity > 0).then(|| Arc::new(TokenCache::new(capacity)));
        self
    }

    /// How many verified buyer tokens are remembered.
    pub fn cached_buyer_tokens(&self) -> usize {
        self.buyer_cache.as_ref().map_or(0, |c| c.len())
    }

    /// A verifier over `buyer` keys and the `service` key set. With a buyer key set, the
    /// first fetch and the periodic refresh run in a background task (so this needs a
    /// Tokio runtime); until keys arrive, a buyer token's unknown `kid` fetches them itself.
    pub fn from_source(buyer: &BuyerKeySource, service: &ServiceKeys, audience: Audience) -> Self {
        let mut this = Self::new(&DevKey::BuyerTokens.verifying_key(), service, audience);
        this.buyer_keys = match buyer {
            BuyerKeySource::Static(key) => BuyerKeys::Static(decoding_key(key)),
            BuyerKeySource::Jwks {
                url,
                min_refresh,
                refresh_every,
                trust,
            } => {
                let remote = RemoteKeys::new(url.clone(), *min_refresh, trust);
                let started = remote.clone();
                let every = *refresh_every;
                tokio::spawn(async move {
                    started.start(std::time::Duration::ZERO, every).await;
                });
                BuyerKeys::Remote(remote)
            }
        };
        this
    }

    /// Buyer keys from [`BuyerKeySource::from_secrets`], service keys from
    /// `SERVICE_KEYS`; development keys where unset only in development mode (warned),
    /// otherwise every unset one is named in the error. Needs a Tokio runtime.
    pub fn from_env(audience: Audience) -> Result<Self, config::Error> {
        let mut secrets = Secrets::from_env()?;
        let buyer = BuyerKeySource::from_secrets(&mut secrets)?;
        let service = ServiceKeys::from_secrets(&mut secrets)?;
        secrets.finish()?.warn("verifier");
        Ok(Self::from_source(&buyer, &service, audience))
    }

    /// The service whose credentials this verifier admits.
    pub fn audience(&self) -> Audience {
        self.audience
    }

    /// The member service's key set this verifier follows, if it follows one.
    pub fn remote_keys(&self) -> Option<&Arc<RemoteKeys>> {
        match &self.buyer_keys {
            BuyerKeys::Remote(r) => Some(r),
            BuyerKeys::Static(_) => None,
        }
    }

    /// DEVELOPMENT ONLY: the development keys, for the service `audience`.
    pub fn development(audience: Audience) -> Self {
        Self::new(
            &DevKey::BuyerTokens.verifying_key(),
            &ServiceKeys::development(),
            audience,
        )
    }

    /// A buyer token checked against the keys held now; never waits on the network.
    pub fn verify_buyer(&self, token: &str) -> Option<MemberId> {
        self.verify_buyer_identity(token).map(|b| b.member)
    }

    /// [`Self::verify_buyer`], with what the token says of its member.
    pub fn verify_buyer_identity(&self, token: &str) -> Option<BuyerIdentity> {
        let now = chrono::Utc::now().timestamp();
        if let Some(member) = self.buyer_cache.as_ref().and_then(|c| c.get(token, now)) {
            return Some(member);
        }
        let key = match &self.buyer_keys {
            BuyerKeys::Static(key) => key.clone(),
            BuyerKeys::Remote(remote) => remote.get(&token_kid(token)?)?,
        };
        self.verify_buyer_with(token, &key, now)
    }

    /// Like [`Self::verify_buyer`], but a token naming a key this process has not seen
    /// fetches the member service's key set first (at most once per the source's
    /// `min_refresh`), so a rotated-in key works without a restart.
    pub async fn verify_buyer_fetching(&self, token: &str) -> Option<MemberId> {
        self.verify_buyer_identity_fetching(token)
            .await
            .map(|b| b.member)
    }

    /// [`Self::verify_buyer_fetching`], with what the token says of its member.
    pub async fn verify_buyer_identity_fetching(&self, token: &str) -> Option<BuyerIdentity> {
        if let Some(buyer) = self.verify_buyer_identity(token) {
            return Some(buyer);
        }
        let BuyerKeys::Remote(remote) = &self.buyer_keys else {
            return None;
        };
        let kid = token_kid(token)?;
        if remote.get(&kid).is_some() {
            // The key is known; the token failed on its own merits.
            return None;
        }
        let key = remote.get_or_fetch(&kid).await?;
        self.verify_buyer_with(token, &key, chrono::Utc::now().timestamp())
    }

    fn verify_buyer_with(&self, token: &str, key: &DecodingKey, now: i64) -> Option<BuyerIdentity> {
        let data = jsonwebtoken::decode::<Claims>(token, key, &self.buyer_validation).ok()?;
        if !within_buyer_lifetime(&data.claims) {
            return None;
        }
        let buyer = BuyerIdentity {
            member: MemberId::parse(data.claims.sub).ok()?,
            email_verified: data.claims.email_verified.unwrap_or(false),
        };
        if let Some(cache) = &self.buyer_cache {
            cache.insert(token, &buyer, data.claims.exp, now);
        }
        Some(buyer)
    }

    /// The role of a service credential: signed under the key its `kid` names, that key
    /// registered for the role its `sub` names, made for this verifier's service (`aud`),
    /// within its validity (`nbf`, `exp`) and no longer-lived than
    /// [`MAX_SERVICE_TOKEN_LIFETIME_SECS`]. Anything else is `None`, whatever it claims.
    pub fn verify_service(&self, token: &str) -> Option<ServiceRole> {
        let now = chrono::Utc::now().timestamp();
        if let Some(role) = self.service_cache.get(token, now) {
            return Some(role);
        }
        let kid = token_kid(token)?;
        let (role, key) = self.service_keys.get(&kid)?;
        let claims = jsonwebtoken::decode::<Claims>(token, key, &self.service_validation)
            .ok()?
            .claims;
        let lifetime = claims.exp.saturating_sub(claims.iat);
        if claims.sub != role.name() || lifetime > MAX_SERVICE_TOKEN_LIFETIME_SECS {
            return None;
        }
        self.service_cache.insert(token, role, claims.exp, now);
        Some(*role)
    }
}

/// The `kid` a token's header names, if it parses and names one. A kid longer than a
/// thumbprint is refused before any lookup.
fn token_kid(token: &str) -> Option<String> {
    jsonwebtoken::decode_header(token)
        .ok()?
        .kid
        .filter(|k| !k.is_empty() && k.len() <= 64)
}

/// Mints tokens: buyer tokens in the member service (and, with the development key,
/// in tests), and a service's own credential.
pub struct Minter {
    key: EncodingKey,
    audience: &'static str,
    kid: Option<String>,
}

impl Minter {
    pub fn new(key: &SigningKey, audience: &'static str) -> Self {
        let der = key
            .to_pkcs8_der()
            .expect("an Ed25519 key always encodes as PKCS#8");
        Self {
            key: EncodingKey::from_ed_der(der.as_bytes()),
            audience,
            kid: None,
        }
    }
    /// Like [`Self::new`], naming the key in each token's header by its thumbprint
    /// ([`jwks::kid_of`]), as verifiers following a key set require.
    pub fn with_kid(key: &SigningKey, audience: &'static str) -> Self {
        Self {
            kid: Some(jwks::kid_of(&key.verifying_key())),
            ..Self::new(key, audience)
        }
    }
    /// Names `kid` in each token's header whatever key signs them (for tests of what
    /// verifiers refuse: a verifier checks the signature under the key `kid` names).
    pub fn naming(mut self, kid: Option<String>) -> Self {
        self.kid = kid;
        self
    }
    /// The `kid` this minter puts in its tokens.
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }
    pub fn dev_buyer() -> Self {
        Self::new(&DevKey::BuyerTokens.signing_key(), BUYER_AUDIENCE)
    }
    /// DEVELOPMENT ONLY: service credentials for the service `audience`, signed with
    /// `role`'s development key, naming it by `kid`.
    pub fn dev_service(role: ServiceRole, audience: Audience) -> Self {
        Self::with_kid(&DevKey::Service(role).signing_key(), audience.claim())
    }
    pub fn mint(&self, subject: &str, ttl: std::time::Duration) -> String {
        self.mint_with_claims(subject, ttl).0
    }
    /// A buyer token for `member` saying whether its email is verified.
    pub fn mint_buyer(
        &self,
        member: &str,
        email_verified: bool,
        ttl: std::time::Duration,
    ) -> String {
        let (_, mut claims) = self.mint_with_claims(member, ttl);
        claims.email_verified = Some(email_verified);
        self.sign(&claims)
    }
    /// [`Self::mint`], also returning the claims signed.
    pub fn mint_with_claims(&self, subject: &str, ttl: std::time::Duration) -> (String, Claims) {
        let now = chrono::Utc::now().timestamp();
        let claims = Claims {
            sub: subject.to_owned(),
            aud: self.audience.to_owned(),
            iss: ISSUER.to_owned(),
            iat: now,
            exp: now + ttl.as_secs() as i64,
            nbf: Some(now),
            email_verified: None,
        };
        (self.sign(&claims), claims)
    }
    /// Signs `claims` as they are (tests of what verifiers refuse use it too).
    pub fn sign(&self, claims: &impl Serialize) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = self.kid.clone();
        jsonwebtoken::encode(&header, claims, &self.key)
            .expect("signing with an in-memory Ed25519 key cannot fail")
    }
}

/// Whether any development key's signature verifies on `token`, whatever its claims:
/// such a credential could have been minted by anyone.
pub(crate) fn signed_by_development_key(token: &str) -> bool {
    let mut any = Validation::new(Algorithm::EdDSA);
    any.required_spec_claims.clear();
    any.validate_exp = false;
    any.validate_aud = false;
    DevKey::ALL.iter().any(|d| {
        jsonwebtoken::decode::<serde_json::Value>(token, &decoding_key(&d.verifying_key()), &any)
            .is_ok()
    })
}

fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let value = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer <token>"))?;
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthorized("Authorization header is not valid text"))?;
    value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::unauthorized("expected Authorization: Bearer <token>"))
}

/// An authenticated buyer. Service credentials are refused: buyer endpoints act on
/// behalf of a member and must know which one.
#[derive(Debug, Clone)]
pub struct Buyer(pub MemberId);

impl<S> FromRequestParts<S> for Buyer
where
    S: Send + Sync,
    Arc<Verifier>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let buyer = BuyerIdentity::from_request_parts(parts, state).await?;
        Ok(Buyer(buyer.member))
    }
}

/// An authenticated buyer with what their token says of them, for endpoints that judge
/// a product's eligibility rules; refused like [`Buyer`].
impl<S> FromRequestParts<S> for BuyerIdentity
where
    S: Send + Sync,
    Arc<Verifier>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let verifier = Arc::<Verifier>::from_ref(state);
        let token = bearer(parts)?;
        if let Some(buyer) = verifier.verify_buyer_identity_fetching(token).await {
            return Ok(buyer);
        }
        if verifier.verify_service(token).is_some() {
            return Err(ApiError::forbidden(
                "this endpoint is for buyers; a service credential cannot act as a member",
            ));
        }
        Err(ApiError::unauthorized("invalid or expired token"))
    }
}

/// Who may hold a service credential: its `sub` names one of these. Each internal
/// route admits only the roles that need it; a credential naming anything else is
/// refused on every service route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceRole {
    /// The gate's quota recompute job (reads the order service).
    Gate,
    /// The payment saga (moves money, confirms and cancels reservations).
    Orchestrator,
    /// The member service (opens accounts at sign-up, forwards top-ups).
    Member,
    /// People and their tools: the `paysaga` operator commands, the test harness, the
    /// demo, the benchmark's setup.
    Operator,
    /// The order service (holds a reservation's price on the buyer's account and
    /// releases it).
    Order,
    /// The operator console's own reads (products at the order service, the quota at
    /// the gate): read-only routes, so the console never carries an operator's
    /// credential to another service.
    Console,
}

impl ServiceRole {
    pub const ALL: [ServiceRole; 6] = [
        ServiceRole::Gate,
        ServiceRole::Orchestrator,
        ServiceRole::Member,
        ServiceRole::Operator,
        ServiceRole::Order,
        ServiceRole::Console,
    ];

    /// The role a credential's `sub` names, if it names one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The name a credential of this role carries as its `sub`.
    pub const fn name(self) -> &'static str {
        match self {
            ServiceRole::Gate => "gate",
            ServiceRole::Orchestrator => "orchestrator",
            ServiceRole::Member => "member",
            ServiceRole::Operator => "operator",
            ServiceRole::Order => "order",
            ServiceRole::Console => "console",
        }
    }

    /// This role's bit in an allow list (see [`allow`]).
    pub const fn bit(self) -> u8 {
        match self {
            ServiceRole::Gate => allow::GATE,
            ServiceRole::Orchestrator => allow::ORCHESTRATOR,
            ServiceRole::Member => allow::MEMBER,
            ServiceRole::Operator => allow::OPERATOR,
            ServiceRole::Order => allow::ORDER,
            ServiceRole::Console => allow::CONSOLE,
        }
    }

    /// Whether the allow list `allowed` (bits of [`allow`]) admits this role.
    pub const fn allowed_by(self, allowed: u8) -> bool {
        allowed & self.bit() != 0
    }
}

impl std::fmt::Display for ServiceRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ServiceRole {
    type Err = UnknownRole;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s).ok_or(UnknownRole)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a service role (gate, orchestrator, member, operator, order, console)")]
pub struct UnknownRole;

/// Allow lists: the roles a route admits, as the const parameter of [`Service`] and
/// [`Caller`], e.g. `Service<{ ORCHESTRATOR | OPERATOR }>`. A bit set in the handler's
/// signature keeps each route's callers beside its code, and an extractor without one
/// does not compile.
pub mod allow {
    pub const GATE: u8 = 1;
    pub const ORCHESTRATOR: u8 = 1 << 1;
    pub const MEMBER: u8 = 1 << 2;
    pub const OPERATOR: u8 = 1 << 3;
    pub const ORDER: u8 = 1 << 4;
    pub const CONSOLE: u8 = 1 << 5;
    /// Every role: no route uses it; for checks over the whole set.
    pub const ANY: u8 = GATE | ORCHESTRATOR | MEMBER | OPERATOR | ORDER | CONSOLE;
}

/// The role a verified credential's `sub` names, if the allow list admits it; else
/// 403 `FORBIDDEN_CALLER` naming the roles that may call the route.
pub fn admit(subject: &str, allowed: u8) -> Result<ServiceRole, ApiError> {
    match ServiceRole::parse(subject) {
        Some(role) if role.allowed_by(allowed) => Ok(role),
        _ => Err(forbidden_caller(allowed)),
    }
}

fn forbidden_caller(allowed: u8) -> ApiError {
    let names: Vec<&str> = ServiceRole::ALL
        .into_iter()
        .filter(|r| r.allowed_by(allowed))
        .map(ServiceRole::name)
        .collect();
    ApiError::new(
        axum::http::StatusCode::FORBIDDEN,
        codes::FORBIDDEN_CALLER,
        format!(
            "this route accepts service credentials of: {}",
            names.join(", ")
        ),
    )
}

/// Fails to build (at monomorphization) a route whose allow list is empty or names a
/// bit that is no role.
struct AllowList<const ALLOW: u8>;
impl<const ALLOW: u8> AllowList<ALLOW> {
    const VALID: () = assert!(
        ALLOW != 0 && ALLOW & !allow::ANY == 0,
        "an allow list names at least one role and only roles"
    );
}

/// Whose bearer token a request carries: a service's whose role `ALLOW` admits (a
/// service of another role is refused here), or one that is no service's, for the
/// extractor to judge as a buyer's.
enum Presented<'p> {
    Service(ServiceRole),
    Other(Arc<Verifier>, &'p str),
}

fn presented<'p, S, const ALLOW: u8>(parts: &'p Parts, state: &S) -> Result<Presented<'p>, ApiError>
where
    Arc<Verifier>: FromRef<S>,
{
    let () = AllowList::<ALLOW>::VALID;
    let verifier = Arc::<Verifier>::from_ref(state);
    let token = bearer(parts)?;
    match verifier.verify_service(token) {
        Some(role) => admit(role.name(), ALLOW).map(Presented::Service),
        None => Ok(Presented::Other(verifier, token)),
    }
}

/// An authenticated internal caller (another service or an operator tool) whose role
/// the route's allow list admits: `Service<{ ORCHESTRATOR }>`. Buyer tokens are refused
/// with 403 `FORBIDDEN`, credentials of other roles (or of no role) with 403
/// `FORBIDDEN_CALLER`, before the handler reads anything.
#[derive(Debug, Clone, Copy)]
pub struct Service<const ALLOW: u8>(pub ServiceRole);

/// The extractor `$caller<ALLOW>`: a service credential the allow list admits is
/// `$service(role)`; any other token is judged by `$other` (given the verifier and the
/// token), whose answer it is.
macro_rules! internal_caller_extractor {
    ($caller:ident, $service:path, |$verifier:ident, $token:ident| $other:expr) => {
        impl<S, const ALLOW: u8> FromRequestParts<S> for $caller<ALLOW>
        where
            S: Send + Sync,
            Arc<Verifier>: FromRef<S>,
        {
            type Rejection = ApiError;

            async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
                match presented::<S, ALLOW>(parts, state)? {
                    Presented::Service(role) => Ok($service(role)),
                    Presented::Other($verifier, $token) => $other,
                }
            }
        }
    };
}

internal_caller_extractor!(Service, Service, |verifier, token| {
    if verifier.verify_buyer(token).is_some() {
        return Err(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            codes::FORBIDDEN,
            "this endpoint requires a service credential",
        ));
    }
    Err(ApiError::unauthorized("invalid or expired token"))
});

/// Either kind of caller, for endpoints both may use (a buyer sees only their own
/// data); a service must be of a role in the allow list, as for [`Service`].
#[derive(Debug, Clone)]
pub enum Caller<const ALLOW: u8> {
    Buyer(MemberId),
    Service(ServiceRole),
}

impl<const ALLOW: u8> Caller<ALLOW> {
    /// Whether this caller may see data owned by `owner`.
    pub fn may_access(&self, owner: &str) -> bool {
        match self {
            Caller::Service(_) => true,
            Caller::Buyer(m) => m.as_str() == owner,
        }
    }
}

internal_caller_extractor!(Caller, Caller::Service, |verifier, token| {
    match verifier.verify_buyer_fetching(token).await {
        Some(member) => Ok(Caller::Buyer(member)),
        None => Err(ApiError::unauthorized("invalid or expired token")),
    }
});

#[cfg(test)]
mod jwks_url_tests {
    use super::jwks_url;

    #[test]
    fn a_key_set_url_is_https_outside_development_unless_on_loopback() {
        for ok in [
            "https://member:8081/.well-known/jwks.json",
            "https://member.paysaga.svc/.well-known/jwks.json",
            "http://127.0.0.1:8081/.well-known/jwks.json",
            "http://127.9.9.9:8081/.well-known/jwks.json",
            "http://localhost:8081/.well-known/jwks.json",
            "http://[::1]:8081/.well-known/jwks.json",
        ] {
            assert_eq!(jwks_url(ok, false).expect(ok), ok);
        }
        for refused in [
            "http://member:8081/.well-known/jwks.json",
            "http://10.0.0.5/.well-known/jwks.json",
            "http://localhost.example.com/.well-known/jwks.json",
            "ftp://member/.well-known/jwks.json",
            "member:8081/jwks.json",
        ] {
            let e = jwks_url(refused, false).expect_err(refused);
            assert_eq!(e.name, "MEMBER_JWKS_URL");
        }
        // Development mode takes plain http anywhere, never another scheme.
        assert!(jwks_url("http://member:8081/.well-known/jwks.json", true).is_ok());
        assert!(jwks_url("ftp://member/.well-known/jwks.json", true).is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The service these tests' verifiers stand for.
    const AUD: Audience = Audience::Account;

    #[test]
    fn buyer_and_service_tokens_do_not_cross() {
        let v = Verifier::development(AUD);
        let buyer = Minter::dev_buyer().mint("member-1", Duration::from_secs(60));
        let svc = Minter::dev_service(ServiceRole::Orchestrator, AUD)
            .mint("orchestrator", Duration::from_secs(60));
        assert_eq!(v.verify_buyer(&buyer).map(|m| m.0), Some("member-1".into()));
        assert_eq!(v.verify_service(&svc), Some(ServiceRole::Orchestrator));
        assert!(v.verify_service(&buyer).is_none());
        assert!(v.verify_buyer(&svc).is_none());
    }

    #[test]
    fn a_buyer_token_says_whether_the_email_is_verified_and_its_absence_is_no() {
        let v = Verifier::development(AUD).with_buyer_cache(32);
        let m = Minter::dev_buyer();
        let ttl = Duration::from_secs(60);
        let said = |token: &str| v.verify_buyer_identity(token).map(|b| b.email_verified);
        assert_eq!(said(&m.mint_buyer("member-1", true, ttl)), Some(true));
        assert_eq!(said(&m.mint_buyer("member-1", false, ttl)), Some(false));
        assert_eq!(said(&m.mint("member-1", ttl)), Some(false));
        let cached = m.mint_buyer("member-2", true, ttl);
        assert_eq!(said(&cached), Some(true));
        assert_eq!(said(&cached), Some(true), "the cache keeps the claim");
    }

    #[test]
    fn the_cache_remembers_only_verified_tokens_and_stays_bounded() {
        let v = Verifier::development(AUD).with_buyer_cache(32);
        let m = Minter::dev_buyer();
        let token = m.mint("member-1", Duration::from_secs(60));
        assert_eq!(v.verify_buyer(&token).map(|m| m.0), Some("member-1".into()));
        assert_eq!(v.verify_buyer(&token).map(|m| m.0), Some("member-1".into()));
        assert_eq!(v.cached_buyer_tokens(), 1);
        let cache = v.buyer_cache.as_ref().unwrap();
        let now = chrono::Utc::now().timestamp();
        assert!(
            cache.get(&token, now + 61).is_none(),
            "past its expiry the entry no longer answers"
        );

        let forged = Minter::new(
            &DevKey::Service(ServiceRole::Gate).signing_key(),
            BUYER_AUDIENCE,
        )
        .mint("member-1", Duration::from_secs(60));
        assert!(v.verify_buyer(&forged).is_none());
        let mut tampered = token.clone();
        tampered.push('x');
        assert!(v.verify_buyer(&tampered).is_none());
        let svc = Minter::dev_service(ServiceRole::Gate, AUD).mint("gate", Duration::from_secs(60));
        assert!(v.verify_buyer(&svc).is_none());
        assert_eq!(
            v.cached_buyer_tokens(),
            1,
            "refused tokens are never cached"
        );

        for i in 0..500 {
            assert!(v
                .verify_buyer(&m.mint(&format!("m{i}"), Duration::from_secs(60)))
                .is_some());
        }
        assert!(v.cached_buyer_tokens() <= 32);
    }

    #[test]
    fn service_credentials_are_remembered_only_once_verified() {
        let v = Verifier::development(AUD);
        let token = Minter::dev_service(ServiceRole::Orchestrator, AUD)
            .mint("orchestrator", Duration::from_secs(60));
        assert_eq!(v.verify_service(&token), Some(ServiceRole::Orchestrator));
        assert_eq!(v.verify_service(&token), Some(ServiceRole::Orchestrator));
        let now = chrono::Utc::now().timestamp();
        assert_eq!(
            v.service_cache.get(&token, now),
            Some(ServiceRole::Orchestrator)
        );
        assert!(
            v.service_cache.get(&token, now + 61).is_none(),
            "past its expiry the entry no longer answers"
        );
        // A clone shares the memory.
        assert_eq!(v.clone().service_cache.len(), 1);

        let mut tampered = token.clone();
        tampered.push('x');
        assert!(v.verify_service(&tampered).is_none());
        // Signed by the gate's key but naming the orchestrator: refused, not remembered.
        let wrong_role = Minter::dev_service(ServiceRole::Gate, AUD)
            .mint("orchestrator", Duration::from_secs(60));
        assert!(v.verify_service(&wrong_role).is_none());
        let buyer = Minter::dev_buyer().mint("member-1", Duration::from_secs(60));
        assert!(v.verify_service(&buyer).is_none());
        assert_eq!(v.service_cache.len(), 1, "refused tokens are never cached");
        assert!(
            v.verify_buyer(&token).is_none(),
            "a remembered service credential is still no buyer token"
        );
    }

    #[test]
    fn buyer_key_signing_a_service_audience_is_refused() {
        let v = Verifier::development(AUD);
        let forged = Minter::with_kid(&DevKey::BuyerTokens.signing_key(), AUD.claim())
            .mint("orchestrator", Duration::from_secs(60));
        assert!(v.verify_service(&forged).is_none());
    }

    #[test]
    fn expired_and_tampered_tokens_are_refused() {
        let v = Verifier::development(AUD);
        let m = Minter::dev_buyer();
        let now = chrono::Utc::now().timestamp();
        let expired = jsonwebtoken::encode(
            &Header::new(Algorithm::EdDSA),
            &Claims {
                sub: "m".into(),
                aud: BUYER_AUDIENCE.into(),
                iss: ISSUER.into(),
                iat: now - 100,
                exp: now - 60,
                nbf: None,
                email_verified: None,
            },
            &m.key,
        )
        .unwrap();
        assert!(v.verify_buyer(&expired).is_none());
        let good = m.mint("member-1", Duration::from_secs(60));
        let mut tampered = good.clone();
        tampered.insert(good.find('.').unwrap() + 3, 'x');
        assert!(v.verify_buyer(&tampered).is_none());
    }

    fn buyer_token_with(claims: serde_json::Value) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::EdDSA),
            &claims,
            &Minter::dev_buyer().key,
        )
        .unwrap()
    }

    fn buyer_claims(iat: i64, exp: i64) -> serde_json::Value {
        serde_json::json!({
            "sub": "member-1", "aud": BUYER_AUDIENCE, "iss": ISSUER, "iat": iat, "exp": exp,
        })
    }

    #[test]
    fn a_token_not_yet_valid_is_refused() {
        let v = Verifier::development(AUD);
        let now = chrono::Utc::now().timestamp();
        let mut later = buyer_claims(now, now + 600);
        later["nbf"] = (now + 300).into();
        assert!(v.verify_buyer(&buyer_token_with(later)).is_none());
        let mut now_valid = buyer_claims(now, now + 600);
        now_valid["nbf"] = (now - 1).into();
        assert!(v.verify_buyer(&buyer_token_with(now_valid)).is_some());
    }

    #[test]
    fn buyer_tokens_live_at_most_the_maximum_and_need_iat() {
        let v = Verifier::development(AUD);
        let now = chrono::Utc::now().timestamp();
        let longest = buyer_claims(now, now + MAX_BUYER_TOKEN_LIFETIME_SECS);
        assert!(v.verify_buyer(&buyer_token_with(longest)).is_some());
        let too_long = buyer_claims(now, now + MAX_BUYER_TOKEN_LIFETIME_SECS + 1);
        assert!(v.verify_buyer(&buyer_token_with(too_long)).is_none());
        // Backdating `iat` does not help: the lifetime is exp - iat.
        let decade = buyer_claims(now - 10, now + 10 * 365 * 86_400);
        assert!(v.verify_buyer(&buyer_token_with(decade)).is_none());
        let mut no_iat = buyer_claims(now, now + 60);
        no_iat.as_object_mut().unwrap().remove("iat");
        assert!(v.verify_buyer(&buyer_token_with(no_iat)).is_none());
        let minted = Minter::dev_buyer().mint(
            "m",
            Duration::from_secs(MAX_BUYER_TOKEN_LIFETIME_SECS as u64 + 60),
        );
        assert!(v.verify_buyer(&minted).is_none());
    }

    #[test]
    fn roles_are_parsed_from_the_subject_and_admitted_by_their_bit_only() {
        for role in ServiceRole::ALL {
            assert_eq!(ServiceRole::parse(role.name()), Some(role));
            assert_eq!(admit(role.name(), role.bit()).ok(), Some(role));
            assert!(admit(role.name(), allow::ANY & !role.bit()).is_err());
        }
        for name in [
            "",
            "Operator",
            "paysaga-demo",
            "Order",
            "account",
            "operator ",
        ] {
            let e = admit(name, allow::ANY).expect_err(name);
            assert_eq!((e.status.as_u16(), e.code), (403, codes::FORBIDDEN_CALLER));
        }
        let e = admit("gate", allow::ORCHESTRATOR | allow::OPERATOR).unwrap_err();
        assert_eq!(
            e.message,
            "this route accepts service credentials of: orchestrator, operator"
        );
    }

    fn service_claims(sub: &str, iat: i64, exp: i64) -> serde_json::Value {
        serde_json::json!({
            "sub": sub, "aud": AUD.claim(), "iss": ISSUER, "iat": iat, "nbf": iat, "exp": exp,
        })
    }

    #[test]
    fn a_service_credential_verifies_only_under_a_key_of_the_role_it_names() {
        let v = Verifier::development(AUD);
        let now = chrono::Utc::now().timestamp();
        let gate = Minter::dev_service(ServiceRole::Gate, AUD);
        let orchestrator = Minter::dev_service(ServiceRole::Orchestrator, AUD);
        let ok = service_claims("orchestrator", now, now + 300);
        assert_eq!(
            v.verify_service(&orchestrator.sign(&ok)),
            Some(ServiceRole::Orchestrator)
        );
        // The gate's key claiming another role, under its own kid or the other's.
        assert!(v.verify_service(&gate.sign(&ok)).is_none());
        let borrowed_kid = Minter::new(
            &DevKey::Service(ServiceRole::Gate).signing_key(),
            AUD.claim(),
        )
        .naming(orchestrator.kid.clone());
        assert!(v.verify_service(&borrowed_kid.sign(&ok)).is_none());
        // A name that is no role has no key at all.
        assert!(v
            .verify_service(&gate.sign(&service_claims("stranger", now, now + 60)))
            .is_none());
        // Unknown key, or none named.
        let stranger = SigningKey::from_bytes(&[7; 32]);
        assert!(v
            .verify_service(&Minter::with_kid(&stranger, AUD.claim()).sign(&ok))
            .is_none());
        let unnamed = Minter::new(
            &DevKey::Service(ServiceRole::Orchestrator).signing_key(),
            AUD.claim(),
        );
        assert!(v.verify_service(&unnamed.sign(&ok)).is_none());
    }

    #[test]
    fn service_credentials_are_short_lived_and_not_early() {
        let v = Verifier::development(AUD);
        let now = chrono::Utc::now().timestamp();
        let m = Minter::dev_service(ServiceRole::Gate, AUD);
        let longest = service_claims("gate", now, now + MAX_SERVICE_TOKEN_LIFETIME_SECS);
        assert!(v.verify_service(&m.sign(&longest)).is_some());
        let too_long = service_claims("gate", now, now + MAX_SERVICE_TOKEN_LIFETIME_SECS + 1);
        assert!(v.verify_service(&m.sign(&too_long)).is_none());
        let decade = m.mint("gate", Duration::from_secs(10 * 365 * 86_400));
        assert!(v.verify_service(&decade).is_none());
        let expired = service_claims("gate", now - 300, now - 60);
        assert!(v.verify_service(&m.sign(&expired)).is_none());
        let mut early = service_claims("gate", now, now + 600);
        early["nbf"] = (now + 300).into();
        assert!(v.verify_service(&m.sign(&early)).is_none());
        let mut no_nbf = service_claims("gate", now, now + 60);
        no_nbf.as_object_mut().unwrap().remove("nbf");
        assert!(v.verify_service(&m.sign(&no_nbf)).is_none());
        let mut no_iat = service_claims("gate", now, now + 60);
        no_iat.as_object_mut().unwrap().remove("iat");
        assert!(v.verify_service(&m.sign(&no_iat)).is_none());
    }

    #[test]
    fn credentials_signed_with_a_development_key_are_recognised() {
        let dev = Minter::dev_service(ServiceRole::Gate, AUD).mint("gate", Duration::from_secs(60));
        assert!(signed_by_development_key(&dev));
        let expired = jsonwebtoken::encode(
            &Header::new(Algorithm::EdDSA),
            &serde_json::json!({"sub": "gate", "exp": 1}),
            &Minter::dev_service(ServiceRole::Gate, AUD).key,
        )
        .unwrap();
        assert!(signed_by_development_key(&expired), "whatever its claims");
        let own = SigningKey::from_bytes(&[42; 32]);
        let real = Minter::new(&own, AUD.claim()).mint("gate", Duration::from_secs(60));
        assert!(!signed_by_development_key(&real));
        assert!(!signed_by_development_key("not a token"));
    }

    #[test]
    fn a_service_credential_opens_only_the_service_it_names() {
        let now = chrono::Utc::now().timestamp();
        for to in Audience::ALL {
            let token = Minter::dev_service(ServiceRole::Operator, to)
                .mint("operator", Duration::from_secs(60));
            for at in Audience::ALL {
                let v = Verifier::development(at);
                assert_eq!(
                    v.verify_service(&token).is_some(),
                    to == at,
                    "a credential for {to} at {at}"
                );
            }
        }
        // The old shared audience, an audience list, and none at all are refused too.
        let m = Minter::dev_service(ServiceRole::Operator, AUD);
        let v = Verifier::development(AUD);
        for aud in [
            serde_json::json!("paysaga:service"),
            serde_json::json!(["paysaga:account", "paysaga:order"]),
            serde_json::json!(["paysaga:account"]),
            serde_json::Value::Null,
        ] {
            let claims = serde_json::json!({
                "sub": "operator", "aud": aud, "iss": ISSUER, "iat": now, "nbf": now, "exp": now + 60,
            });
            assert!(v.verify_service(&m.sign(&claims)).is_none(), "aud {aud}");
        }
        assert_eq!(Audience::parse("paysaga:order"), Some(Audience::Order));
        assert_eq!(Audience::parse("gate"), Some(Audience::Gate));
        assert_eq!(Audience::parse("paysaga:service"), None);
    }
}
