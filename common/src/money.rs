//! Money as integer minor units: never floats, never negative where an amount is meant.

use serde::{Deserialize, Serialize};

/// A strictly positive amount in minor units (cents). Parsed at the edge, so the
/// inside never re-validates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct Amount(i64);

/// The schema states the bounds [`Amount::new`] enforces: 1 to [`MAX_AMOUNT`].
impl utoipa::PartialSchema for Amount {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(1))
            .maximum(Some(MAX_AMOUNT))
            .examples([12900])
            .into()
    }
}

/// The largest amount one operation may move; far above any real price, far below overflow.
pub const MAX_AMOUNT: i64 = 1_000_000_000_000;

impl Amount {
    pub fn new(minor: i64) -> Result<Self, AmountError> {
        if minor <= 0 {
            Err(AmountError::NotPositive)
        } else if minor > MAX_AMOUNT {
            Err(AmountError::TooLarge)
        } else {
            Ok(Self(minor))
        }
    }
    pub fn minor(self) -> i64 {
        self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    #[error("amount must be a positive number of minor units")]
    NotPositive,
    #[error("amount exceeds the maximum of {MAX_AMOUNT} minor units")]
    TooLarge,
}

crate::checked_newtype!(Amount(i64), new, AmountError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_zero_negative_and_huge() {
        assert_eq!(Amount::new(0), Err(AmountError::NotPositive));
        assert_eq!(Amount::new(-5), Err(AmountError::NotPositive));
        assert_eq!(Amount::new(MAX_AMOUNT + 1), Err(AmountError::TooLarge));
        assert_eq!(Amount::new(1).map(Amount::minor), Ok(1));
    }

    #[test]
    fn deserialises_through_validation() {
        assert!(serde_json::from_str::<Amount>("-1").is_err());
        assert!(serde_json::from_str::<Amount>("1.5").is_err());
        assert_eq!(
            serde_json::from_str::<Amount>("250")
                .map(Amount::minor)
                .ok(),
            Some(250)
        );
    }
}
