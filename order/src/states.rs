//! The states of a unit, and how a state column is read: as its enum, never as a string.

use std::{error::Error as StdError, str::FromStr};

use serde::Deserialize;
use sqlx::{
    error::BoxDynError,
    postgres::{PgTypeInfo, PgValueRef},
    Decode, Postgres, Type,
};

/// Where a unit is (`product_stock.state`, CHECK `product_stock_state_valid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum UnitState {
    /// On sale: a claim may take it.
    Available,
    /// Held by a live reservation.
    Reserved,
    /// Held for a waitlist member's live offer.
    Offered,
    /// Sold by a confirmed reservation's order.
    Sold,
}

impl UnitState {
    pub fn as_str(self) -> &'static str {
        match self {
            UnitState::Available => "AVAILABLE",
            UnitState::Reserved => "RESERVED",
            UnitState::Offered => "OFFERED",
            UnitState::Sold => "SOLD",
        }
    }
}

impl FromStr for UnitState {
    type Err = UnknownUnitState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "AVAILABLE" => UnitState::Available,
            "RESERVED" => UnitState::Reserved,
            "OFFERED" => UnitState::Offered,
            "SOLD" => UnitState::Sold,
            _ => return Err(UnknownUnitState(s.to_owned())),
        })
    }
}

impl std::fmt::Display for UnitState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown unit state {0:?}")]
pub struct UnknownUnitState(String);

/// A TEXT column read as `T` (a state enum, parsed from its name), so a row's state is
/// typed from the moment it is decoded; a name the enum does not know fails the decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Text<T>(pub T);

impl<T> Type<Postgres> for Text<T> {
    fn type_info() -> PgTypeInfo {
        <String as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <String as Type<Postgres>>::compatible(ty)
    }
}

impl<'r, T> Decode<'r, Postgres> for Text<T>
where
    T: FromStr,
    T::Err: StdError + Send + Sync + 'static,
{
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        let s = <&str as Decode<Postgres>>::decode(value)?;
        Ok(Text(s.parse()?))
    }
}
