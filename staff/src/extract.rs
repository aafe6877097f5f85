//! Who is asking: the extractors that admit people by role. `Person<{ ROLES }>` takes a
//! staff session token (`Authorization: Bearer pss_…`); `PersonOrTool<{ ROLES }>` also
//! takes the operator tools' service credential (role `operator`), counted as an admin,
//! in development mode only (elsewhere it is 403 `PEOPLE_ONLY`: staff routes are for
//! people); `FirstAdminOrPerson` takes it, outside development mode, only while no admin
//! exists, to make the first one.
//! A missing, unknown, expired or signed-out session is 401 `UNAUTHENTICATED`; a
//! role the route does not admit is 403 `FORBIDDEN_ROLE`, before the handler reads or
//! writes anything.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use axum::{
    extract::{ConnectInfo, FromRef, FromRequestParts},
    http::{header::AUTHORIZATION, request::Parts, StatusCode},
};
use paysaga_common::{
    auth::{self, Verifier},
    error::codes as common_codes,
    ApiError,
};

use crate::{
    error::{admit, AllowList, Error, Result},
    sessions::TOKEN_PREFIX,
    Acting, Actor, SignedIn, Staff,
};

/// A person whose role the allow list admits.
#[derive(Debug, Clone)]
pub struct Person<const ALLOW: u8>(pub Acting);

/// A person whose role the allow list admits, or (in development mode) the operator
/// tools' service credential.
#[derive(Debug, Clone)]
pub struct PersonOrTool<const ALLOW: u8>(pub Acting);

/// An admin, or the operator tools' service credential where it acts (development mode)
/// or while no admin exists yet (how a system's first person is made).
#[derive(Debug, Clone)]
pub struct FirstAdminOrPerson(pub Acting);

/// The connection's peer address, if the server recorded it.
pub fn client_addr(parts: &Parts) -> Option<IpAddr> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

impl Staff {
    /// The person a session token names, if the allow list admits their role.
    pub async fn admit(&self, token: &str, allowed: u8) -> Result<SignedIn> {
        let who = self.authenticate(token).await?.ok_or(Error::NoSession)?;
        admit(who.role, allowed)?;
        Ok(who)
    }
}

impl<S, const ALLOW: u8> FromRequestParts<S> for Person<ALLOW>
where
    S: Send + Sync,
    Staff: FromRef<S>,
{
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let () = AllowList::<ALLOW>::VALID;
        let staff = Staff::from_ref(state);
        let token = bearer(parts).ok_or(Error::NoSession)?;
        let who = staff.admit(token, ALLOW).await?;
        Ok(Person(Acting {
            actor: Actor::Staff(who),
            from: client_addr(parts),
        }))
    }
}

/// A router state that admits the operator tools as well as people: the staff sessions,
/// and the verifier of the tools' service credential.
pub trait AdmitsTools: Send + Sync {
    fn staff(&self) -> Staff;
    fn verifier(&self) -> Arc<Verifier>;
}

impl<S> AdmitsTools for S
where
    S: Send + Sync,
    Staff: FromRef<S>,
    Arc<Verifier>: FromRef<S>,
{
    fn staff(&self) -> Staff {
        Staff::from_ref(self)
    }

    fn verifier(&self) -> Arc<Verifier> {
        Arc::<Verifier>::from_ref(self)
    }
}

impl<S: AdmitsTools, const ALLOW: u8> FromRequestParts<S> for PersonOrTool<ALLOW> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let () = AllowList::<ALLOW>::VALID;
        let acting = person_or_tool(parts, state, ALLOW, ToolsMay::Nothing).await?;
        Ok(PersonOrTool(acting))
    }
}

impl<S: AdmitsTools> FromRequestParts<S> for FirstAdminOrPerson {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let tools = ToolsMay::MakeTheFirstAdmin;
        let acting = person_or_tool(parts, state, crate::allow::ADMIN, tools).await?;
        Ok(FirstAdminOrPerson(acting))
    }
}

/// What the operator tools' service credential may do outside development mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolsMay {
    /// Nothing: staff routes are for people (403 `PEOPLE_ONLY`).
    Nothing,
    /// Make the system's first admin, while no admin exists.
    MakeTheFirstAdmin,
}

/// A person (by session, whose role `allowed` admits) or the operator tools' service
/// credential where it may act: in development mode, or as `tools` says elsewhere.
async fn person_or_tool(
    parts: &Parts,
    state: &impl AdmitsTools,
    allowed: u8,
    tools: ToolsMay,
) -> Result<Acting> {
    let staff = state.staff();
    let acting = identify(parts, &staff, &state.verifier(), allowed).await?;
    if matches!(acting.actor, Actor::Tool(_))
        && !staff.config.tools_act
        && (tools == ToolsMay::Nothing || staff.has_admin().await?)
    {
        return Err(Error::PeopleOnly);
    }
    Ok(acting)
}

/// A person (by session, whose role `allowed` admits) or the operator tools' service
/// credential; whether the tool may act is the caller's to judge.
async fn identify(
    parts: &Parts,
    staff: &Staff,
    verifier: &Verifier,
    allowed: u8,
) -> Result<Acting> {
    let from = client_addr(parts);
    let token = bearer(parts).ok_or(Error::NoSession)?;
    if token.starts_with(TOKEN_PREFIX) {
        let who = staff.admit(token, allowed).await?;
        return Ok(Acting {
            actor: Actor::Staff(who),
            from,
        });
    }
    if let Some(role) = verifier.verify_service(token) {
        let role = auth::admit(role.name(), auth::allow::OPERATOR)?;
        return Ok(Acting {
            actor: Actor::Tool(role),
            from,
        });
    }
    if verifier.verify_buyer(token).is_some() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            common_codes::FORBIDDEN,
            "this route is for staff; a buyer token cannot act as one",
        )
        .into());
    }
    Err(Error::NoSession)
}

/// The connection's peer address as an extractor (never refuses).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> std::result::Result<Self, Self::Rejection> {
        Ok(ClientAddr(client_addr(parts)))
    }
}
