//! Service credentials: each caller signs its own short-lived tokens with its own key and
//! renews them itself, one per destination service ([`TokenSource`]); verifiers accept
//! one only under a key registered for the role its `sub` names ([`ServiceKeys`]) and
//! only when its audience names their own service.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::Duration,
};

use ed25519_dalek::{SigningKey, VerifyingKey};

use crate::{
    auth::{Audience, Minter, ServiceRole},
    config::{self, ConfigError, Secrets},
    jwks,
    keys::{self, DevKey},
};

/// The keys a service that buyers and services both call checks their tokens with:
/// the buyers' ([`crate::auth::BuyerKeySource`]), then the services' ([`ServiceKeys`]),
/// read from `secrets` in that order.
pub fn caller_keys(
    secrets: &mut Secrets,
) -> Result<(crate::auth::BuyerKeySource, ServiceKeys), ConfigError> {
    let buyer_keys = crate::auth::BuyerKeySource::from_secrets(secrets)?;
    Ok((buyer_keys, ServiceKeys::from_secrets(secrets)?))
}

/// The verifiers' key set: `role:<base64 public key>` entries, comma separated.
pub const SERVICE_KEYS_VAR: &str = "SERVICE_KEYS";
/// A caller's own signing key (base64 of the 32-byte seed).
pub const SERVICE_SIGNING_KEY_VAR: &str = "SERVICE_SIGNING_KEY";
/// The operator console's own signing key (the orchestrator serves the console): its
/// read-only `console` credentials toward the order service and the gate.
pub const CONSOLE_SIGNING_KEY_VAR: &str = "CONSOLE_SIGNING_KEY";
/// How long a caller's tokens live, in seconds (default 300, at most
/// [`MAX_SERVICE_TOKEN_LIFETIME_SECS`]).
pub const SERVICE_TOKEN_LIFETIME_VAR: &str = "SERVICE_TOKEN_LIFETIME_SECS";
/// A ready-made operator credential (the operator commands only); it must be
/// short-lived like every other.
pub const SERVICE_TOKEN_VAR: &str = "SERVICE_TOKEN";

/// The longest a service credential may live (`exp - iat`). Holders renew theirs well
/// before; a token minted for longer is refused, so a leaked one is useless within
/// minutes whoever minted it.
pub const MAX_SERVICE_TOKEN_LIFETIME_SECS: i64 = 15 * 60;

/// The lifetime a holder mints with unless `SERVICE_TOKEN_LIFETIME_SECS` says otherwise.
pub const DEFAULT_SERVICE_TOKEN_LIFETIME: Duration = Duration::from_secs(300);

/// Which public keys may sign credentials of which role. A key belongs to exactly one
/// role, so holding the gate's private key yields gate credentials and nothing else.
/// Several keys per role are allowed (rotation); tokens name theirs by `kid`, the key's
/// thumbprint ([`jwks::kid_of`]).
#[derive(Clone)]
pub struct ServiceKeys {
    by_kid: HashMap<String, (ServiceRole, VerifyingKey)>,
}

impl std::fmt::Debug for ServiceKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut entries: Vec<String> = self
            .by_kid
            .iter()
            .map(|(kid, (role, _))| format!("{role}:{kid}"))
            .collect();
        entries.sort();
        f.debug_tuple("ServiceKeys").field(&entries).finish()
    }
}

impl ServiceKeys {
    /// The set of `entries`. The same key under two roles is refused: either role's
    /// holder could then sign as the other.
    pub fn new(
        entries: impl IntoIterator<Item = (ServiceRole, VerifyingKey)>,
    ) -> Result<Self, String> {
        let mut by_kid = HashMap::new();
        for (role, key) in entries {
            match by_kid.insert(jwks::kid_of(&key), (role, key)) {
                Some((other, _)) if other != role => {
                    return Err(format!(
                        "one key is registered for both {other} and {role}; each role needs a \
                         key of its own"
                    ))
                }
                _ => {}
            }
        }
        if by_kid.is_empty() {
            return Err("names no key".to_owned());
        }
        Ok(Self { by_kid })
    }

    /// `gate:<key>,orchestrator:<key>,...` (commas or whitespace between entries; a role
    /// may appear more than once).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut entries = Vec::new();
        for entry in s
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|e| !e.is_empty())
        {
            let (role, key) = entry
                .split_once(':')
                .ok_or_else(|| format!("`{entry}` is not role:<base64 public key>"))?;
            let role = ServiceRole::parse(role).ok_or_else(|| {
                format!(
                    "`{role}` is not a role (gate, orchestrator, member, operator, order, console)"
                )
            })?;
            let key = keys::parse_verifying_key(key).map_err(|e| format!("{role}: {e}"))?;
            entries.push((role, key));
        }
        Self::new(entries)
    }

    /// DEVELOPMENT ONLY: each role's public development key.
    pub fn development() -> Self {
        Self::new(ServiceRole::ALL.map(|role| (role, DevKey::Service(role).verifying_key())))
            .expect("the development keys are distinct")
    }

    /// `SERVICE_KEYS`. Unset, the development keys in development mode, else missing;
    /// a development key in it is refused in any mode.
    pub fn from_secrets(secrets: &mut Secrets) -> Result<Self, ConfigError> {
        let Some(v) = keys::configured(SERVICE_KEYS_VAR) else {
            secrets.unset(SERVICE_KEYS_VAR);
            return Ok(Self::development());
        };
        let set = Self::parse(&v).map_err(|e| keys::invalid(SERVICE_KEYS_VAR, e))?;
        for (role, key) in set.by_kid.values() {
            if keys::is_development_key(key) {
                return Err(keys::invalid(
                    SERVICE_KEYS_VAR,
                    format!(
                        "its {role} entry is a public DEVELOPMENT key (anyone can sign with it); \
                         configure a key of your own"
                    ),
                ));
            }
        }
        Ok(set)
    }

    /// The role and key a `kid` names, if registered.
    pub fn get(&self, kid: &str) -> Option<(ServiceRole, &VerifyingKey)> {
        self.by_kid.get(kid).map(|(r, k)| (*r, k))
    }

    /// Every `(kid, role, key)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, ServiceRole, &VerifyingKey)> {
        self.by_kid
            .iter()
            .map(|(kid, (r, k))| (kid.as_str(), *r, k))
    }
}

/// `SERVICE_TOKEN_LIFETIME_SECS`: 1 to [`MAX_SERVICE_TOKEN_LIFETIME_SECS`], default 300.
pub fn token_lifetime() -> Result<Duration, ConfigError> {
    let secs: i64 = config::parse(
        SERVICE_TOKEN_LIFETIME_VAR,
        DEFAULT_SERVICE_TOKEN_LIFETIME.as_secs() as i64,
    )?;
    if !(1..=MAX_SERVICE_TOKEN_LIFETIME_SECS).contains(&secs) {
        return Err(ConfigError {
            name: SERVICE_TOKEN_LIFETIME_VAR.to_owned(),
            value: secs.to_string(),
            reason: format!("must be between 1 and {MAX_SERVICE_TOKEN_LIFETIME_SECS}"),
        });
    }
    Ok(Duration::from_secs(secs as u64))
}

/// A holder's own credentials: for each service it calls, mints a token of its role for
/// that service alone (its `aud`) with its key and hands out the same one until less
/// than a third of its lifetime is left, then mints the next. Cheap per request (a read
/// lock and a clock reading); signing happens once per renewal and destination, and
/// only for the destinations actually called.
pub struct TokenSource {
    role: ServiceRole,
    kid: String,
    /// One minter per destination, indexed by [`Audience::index`].
    minters: Vec<Minter>,
    lifetime: Duration,
    current: Vec<RwLock<Current>>,
    /// The key itself, for what else this holder signs with it (the orchestrator's
    /// deposit authorizations, [`crate::deposits`]).
    key: SigningKey,
}

struct Current {
    token: Arc<str>,
    /// Unix milliseconds after which the token is renewed before use.
    renew_at_ms: i64,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("role", &self.role)
            .field("kid", &self.kid())
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    /// Tokens of `role` signed with `key`, each living `lifetime` (whole seconds, at
    /// least one, at most [`MAX_SERVICE_TOKEN_LIFETIME_SECS`]).
    pub fn new(role: ServiceRole, key: &SigningKey, lifetime: Duration) -> Self {
        let secs = lifetime
            .as_secs()
            .clamp(1, MAX_SERVICE_TOKEN_LIFETIME_SECS as u64);
        let minters: Vec<Minter> = Audience::ALL
            .iter()
            .map(|a| Minter::with_kid(key, a.claim()))
            .collect();
        let kid = minters[0]
            .kid()
            .expect("a token source's minter names its key")
            .to_owned();
        Self {
            role,
            kid,
            minters,
            lifetime: Duration::from_secs(secs),
            // Nothing minted yet: a destination's first call mints its token.
            current: Audience::ALL
                .iter()
                .map(|_| {
                    RwLock::new(Current {
                        token: Arc::from(""),
                        renew_at_ms: i64::MIN,
                    })
                })
                .collect(),
            key: key.clone(),
        }
    }

    /// Deposit authorizations signed with this holder's key (the orchestrator's: the
    /// account service accepts only those, [`crate::deposits`]).
    pub fn deposit_signer(&self) -> crate::deposits::DepositSigner {
        crate::deposits::DepositSigner::new(&self.key)
    }

    /// DEVELOPMENT ONLY: `role`'s development key, the default lifetime.
    pub fn development(role: ServiceRole) -> Self {
        Self::new(
            role,
            &DevKey::Service(role).signing_key(),
            DEFAULT_SERVICE_TOKEN_LIFETIME,
        )
    }

    /// `SERVICE_SIGNING_KEY` (unset: `role`'s development key in development mode, else
    /// missing; a development key configured is refused) and
    /// `SERVICE_TOKEN_LIFETIME_SECS`.
    pub fn from_secrets(secrets: &mut Secrets, role: ServiceRole) -> Result<Self, ConfigError> {
        Self::from_secrets_in(secrets, SERVICE_SIGNING_KEY_VAR, role)
    }

    /// Like [`Self::from_secrets`], the key read from `var` (a process that holds a
    /// second role's key, as the orchestrator holds the console's).
    pub fn from_secrets_in(
        secrets: &mut Secrets,
        var: &str,
        role: ServiceRole,
    ) -> Result<Self, ConfigError> {
        let key = keys::signing_key(secrets, var, DevKey::Service(role))?;
        Ok(Self::new(role, &key, token_lifetime()?))
    }

    pub fn role(&self) -> ServiceRole {
        self.role
    }

    /// The `kid` every token of this source carries.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// The current token for the service `to`, renewed first if less than a third of
    /// its lifetime is left. It opens that service only.
    pub fn token(&self, to: Audience) -> Arc<str> {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let slot = &self.current[to.index()];
        {
            let current = slot.read().unwrap_or_else(|p| p.into_inner());
            if now_ms < current.renew_at_ms {
                return current.token.clone();
            }
        }
        let mut current = slot.write().unwrap_or_else(|p| p.into_inner());
        // Another caller may have renewed it while this one waited for the lock.
        if now_ms >= current.renew_at_ms {
            *current = Self::mint(&self.minters[to.index()], self.role, self.lifetime);
        }
        current.token.clone()
    }

    fn mint(minter: &Minter, role: ServiceRole, lifetime: Duration) -> Current {
        let (token, claims) = minter.mint_with_claims(role.name(), lifetime);
        // `exp` is whole seconds after a truncated `iat`, so measure what is left from
        // `exp` itself: the token is handed out only while a third of its lifetime
        // remains.
        let third_ms = lifetime.as_millis() as i64 / 3;
        Current {
            token: token.into(),
            renew_at_ms: claims.exp * 1000 - third_ms,
        }
    }
}

/// What a client presents as its bearer: a fixed token (a buyer's, a test's, one an
/// operator minted for one service) or a holder's renewing [`TokenSource`], which
/// mints one per destination.
#[derive(Clone)]
pub enum Credential {
    Token(Arc<str>),
    Renewed(Arc<TokenSource>),
}

impl Credential {
    /// The token to send now to the service `to` (a fixed token is sent as it is).
    pub fn bearer(&self, to: Audience) -> Arc<str> {
        match self {
            Credential::Token(t) => t.clone(),
            Credential::Renewed(source) => source.token(to),
        }
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Token(_) => f.write_str("Credential::Token(<redacted>)"),
            Credential::Renewed(s) => f.debug_tuple("Credential::Renewed").field(s).finish(),
        }
    }
}

impl From<String> for Credential {
    fn from(t: String) -> Self {
        Credential::Token(t.into())
    }
}

impl From<&String> for Credential {
    fn from(t: &String) -> Self {
        Credential::Token(t.as_str().into())
    }
}

impl From<&str> for Credential {
    fn from(t: &str) -> Self {
        Credential::Token(t.into())
    }
}

impl From<Arc<TokenSource>> for Credential {
    fn from(s: Arc<TokenSource>) -> Self {
        Credential::Renewed(s)
    }
}

impl From<&Arc<TokenSource>> for Credential {
    fn from(s: &Arc<TokenSource>) -> Self {
        Credential::Renewed(s.clone())
    }
}

impl From<TokenSource> for Credential {
    fn from(s: TokenSource) -> Self {
        Credential::Renewed(Arc::new(s))
    }
}

impl From<&Credential> for Credential {
    fn from(c: &Credential) -> Self {
        c.clone()
    }
}

/// The operator commands' credential: `SERVICE_TOKEN` if set (a short-lived operator
/// token minted elsewhere for the one service it opens; one signed with a development
/// key or living longer than
/// [`MAX_SERVICE_TOKEN_LIFETIME_SECS`] is refused), else tokens minted and renewed with
/// the operator's own `SERVICE_SIGNING_KEY`; with neither, the operator's development
/// key in development mode (warned), else both are named as missing.
pub fn operator_credential_from_env() -> Result<Credential, config::Error> {
    let mut secrets = Secrets::from_env()?;
    let credential = if let Some(token) = keys::configured(SERVICE_TOKEN_VAR) {
        Credential::from(check_operator_token(token.trim())?)
    } else if keys::configured(SERVICE_SIGNING_KEY_VAR).is_some() {
        TokenSource::from_secrets(&mut secrets, ServiceRole::Operator)?.into()
    } else {
        secrets.unset(&format!("{SERVICE_SIGNING_KEY_VAR} or {SERVICE_TOKEN_VAR}"));
        TokenSource::new(
            ServiceRole::Operator,
            &DevKey::Service(ServiceRole::Operator).signing_key(),
            token_lifetime()?,
        )
        .into()
    };
    secrets.finish()?.warn("operator");
    Ok(credential)
}

fn check_operator_token(token: &str) -> Result<String, ConfigError> {
    let refuse = |reason: &str| keys::invalid(SERVICE_TOKEN_VAR, reason.to_owned());
    if crate::auth::signed_by_development_key(token) {
        return Err(refuse(
            "is signed with a public DEVELOPMENT key; mint it with a key of your own",
        ));
    }
    // Its signature is the services' to judge; its lifetime is checked here so an
    // operator learns at once rather than from a 401.
    let claims = jsonwebtoken::dangerous::insecure_decode::<crate::auth::Claims>(token)
        .map_err(|_| refuse("is not a readable token with iat and exp"))?
        .claims;
    if claims.exp.saturating_sub(claims.iat) > MAX_SERVICE_TOKEN_LIFETIME_SECS {
        return Err(refuse(&format!(
            "lives longer than {MAX_SERVICE_TOKEN_LIFETIME_SECS} seconds; services refuse it \
             (set {SERVICE_SIGNING_KEY_VAR} to mint and renew short-lived ones)"
        )));
    }
    Ok(token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{auth::Verifier, keys::generate_signing_key as fresh};

    const AUD: Audience = Audience::Account;

    #[test]
    fn key_sets_parse_and_keep_each_key_to_one_role() {
        let (a, b, c) = (fresh(), fresh(), fresh());
        let enc = |k: &SigningKey| keys::encode_verifying_key(&k.verifying_key());
        let set = ServiceKeys::parse(&format!(
            "gate:{}, orchestrator:{}\noperator:{}",
            enc(&a),
            enc(&b),
            enc(&c)
        ))
        .unwrap();
        let kid = jwks::kid_of(&b.verifying_key());
        assert_eq!(
            set.get(&kid).map(|(r, _)| r),
            Some(ServiceRole::Orchestrator)
        );
        assert_eq!(set.iter().count(), 3);
        // Two keys for one role (rotation) are fine; one key for two roles is not.
        assert!(ServiceKeys::parse(&format!("gate:{},gate:{}", enc(&a), enc(&b))).is_ok());
        let e = ServiceKeys::parse(&format!("gate:{},member:{}", enc(&a), enc(&a))).unwrap_err();
        assert!(e.contains("both gate and member"), "{e}");
        assert!(ServiceKeys::parse("").is_err());
        assert!(ServiceKeys::parse(&format!("account:{}", enc(&a))).is_err());
        assert!(ServiceKeys::parse("gate:AAAA").is_err());
        assert!(ServiceKeys::parse(&enc(&a)).is_err());
    }

    #[test]
    fn a_source_hands_out_one_token_until_renewal_is_due() {
        let source = TokenSource::development(ServiceRole::Member);
        let first = source.token(AUD);
        assert!(
            Arc::ptr_eq(&source.token(AUD), &first),
            "cached, not minted per request"
        );
        let v = Verifier::development(AUD);
        assert_eq!(v.verify_service(&first), Some(ServiceRole::Member));
        let renew_at = |s: &TokenSource| s.current[AUD.index()].read().unwrap().renew_at_ms;
        // A third of 300 s before expiry.
        let exp_ms = chrono::Utc::now().timestamp() * 1000 + 300_000;
        assert!((exp_ms - 101_000..=exp_ms - 99_000).contains(&renew_at(&source)));
        source.current[AUD.index()].write().unwrap().renew_at_ms = 0;
        let second = source.token(AUD);
        assert!(!Arc::ptr_eq(&second, &first), "minted again once due");
        assert!(renew_at(&source) > 0);
        assert_eq!(v.verify_service(&second), Some(ServiceRole::Member));
        // Each destination gets its own token, which no other service admits.
        let other = source.token(Audience::Order);
        assert_ne!(&*other, &*second);
        assert!(v.verify_service(&other).is_none());
        assert_eq!(
            Verifier::development(Audience::Order).verify_service(&other),
            Some(ServiceRole::Member)
        );
        assert_eq!(
            TokenSource::new(ServiceRole::Gate, &fresh(), Duration::from_secs(86_400)).lifetime(),
            Duration::from_secs(MAX_SERVICE_TOKEN_LIFETIME_SECS as u64),
            "a lifetime beyond the maximum is clamped"
        );
    }

    #[test]
    fn operator_tokens_must_be_short_lived_and_not_development_signed() {
        let own = fresh();
        let ok = Minter::with_kid(&own, AUD.claim()).mint("operator", Duration::from_secs(600));
        assert!(check_operator_token(&ok).is_ok());
        let long =
            Minter::with_kid(&own, AUD.claim()).mint("operator", Duration::from_secs(86_400));
        assert!(check_operator_token(&long)
            .unwrap_err()
            .reason
            .contains("longer"));
        let dev = Minter::dev_service(ServiceRole::Operator, AUD)
            .mint("operator", Duration::from_secs(60));
        assert!(check_operator_token(&dev)
            .unwrap_err()
            .reason
            .contains("DEVELOPMENT"));
        assert!(check_operator_token("junk").is_err());
    }
}
