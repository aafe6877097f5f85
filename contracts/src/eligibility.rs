//! Who may take part in a drop: the rules a product sets (`CreateProduct.eligibility`,
//! stored and listed by the order service) and the one judge of them, [`judge`], which
//! the gate runs before a pass takes any quota and the order service runs before a
//! member joins a waitlist.
//!
//! What the judge knows of a member comes from the member's buyer token alone, so no
//! rule needs a call: the member service issues UUIDv7 ids, whose timestamp is the
//! moment of sign-up (RFC 9562), and signs whether the member's email is verified into
//! the token (`email_verified`, as OpenID Connect names it). An id that is no UUIDv7 has
//! no known creation time and does not pass a rule that asks for one; a token without
//! the claim is of a member whose email is not verified.

use chrono::{DateTime, Utc};
use paysaga_common::auth::{BuyerIdentity, MemberId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// The most rules a product keeps (one of each kind).
pub const MAX_RULES: usize = 2;
/// The most rules a product's creation may give (repeats of a kind are folded into one:
/// [`normalize`]).
pub const MAX_GIVEN: usize = 16;

/// One rule a product sets on who may take a pass for it. On the wire:
/// `{"rule": "ACCOUNT_CREATED_BEFORE", "at": "2026-12-01T09:00:00Z"}`,
/// `{"rule": "EMAIL_VERIFIED"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(tag = "rule", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EligibilityRule {
    /// Only members whose account was created strictly before `at` (typically the
    /// moment the drop was announced): accounts made after it cannot take a pass.
    AccountCreatedBefore { at: DateTime<Utc> },
    /// Only members who verified their email (the sign-up's verification token handed
    /// back to the member service).
    EmailVerified,
}

impl EligibilityRule {
    /// The kind of rule, for "one of each kind" and the metrics' labels.
    pub fn kind(&self) -> RuleKind {
        match self {
            EligibilityRule::AccountCreatedBefore { .. } => RuleKind::AccountCreatedBefore,
            EligibilityRule::EmailVerified => RuleKind::EmailVerified,
        }
    }
}

/// The kinds of [`EligibilityRule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleKind {
    AccountCreatedBefore,
    EmailVerified,
}

impl RuleKind {
    pub const fn label(self) -> &'static str {
        match self {
            RuleKind::AccountCreatedBefore => "account_created_before",
            RuleKind::EmailVerified => "email_verified",
        }
    }
}

/// The codes a refusal carries, one per rule (status 403).
pub mod codes {
    /// The product admits only accounts created before a time; this one was made later
    /// (or its creation time is unknown).
    pub const ACCOUNT_TOO_NEW: &str = "ACCOUNT_TOO_NEW";
    /// The product admits only members whose email is verified; this one's token says
    /// it is not (a member who verified since signs in again, or refreshes, for a token
    /// that says so).
    pub const EMAIL_NOT_VERIFIED: &str = "EMAIL_NOT_VERIFIED";
    /// A product's `eligibility` gives more rules than allowed.
    pub const INVALID_ELIGIBILITY: &str = "INVALID_ELIGIBILITY";
}

/// What the judge knows of a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberFacts {
    /// When the member signed up; `None` when it cannot be known.
    pub created_at: Option<DateTime<Utc>>,
    /// Whether the member's email is verified, as their token says.
    pub email_verified: bool,
}

impl MemberFacts {
    /// From a verified buyer token: the sign-up moment from the member id
    /// ([`Self::created_at_of`]), the email's state from its `email_verified` claim.
    pub fn of(buyer: &BuyerIdentity) -> Self {
        Self {
            created_at: Self::created_at_of(&buyer.member),
            email_verified: buyer.email_verified,
        }
    }

    /// A UUIDv7's timestamp is its sign-up moment (millisecond precision); any other
    /// id says nothing.
    pub fn created_at_of(member: &MemberId) -> Option<DateTime<Utc>> {
        Uuid::parse_str(member.as_str())
            .ok()
            .filter(|id| id.get_version_num() == 7)
            .and_then(|id| id.get_timestamp())
            .and_then(|ts| {
                let (secs, nanos) = ts.to_unix();
                DateTime::from_timestamp(i64::try_from(secs).ok()?, nanos)
            })
    }
}

/// The id the member service would issue to a member signing up at `at`: a UUIDv7 of
/// that moment (not before 1970), the id [`MemberFacts::from_id`] reads the sign-up
/// time back from.
pub fn member_id_signed_up_at(at: DateTime<Utc>) -> String {
    let ts = uuid::Timestamp::from_unix(
        uuid::NoContext,
        u64::try_from(at.timestamp()).unwrap_or(0),
        at.timestamp_subsec_nanos(),
    );
    Uuid::new_v7(ts).to_string()
}

/// Why a member may not take part, naming the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Ineligible {
    #[error("this drop admits only accounts created before {at}")]
    AccountTooNew { at: DateTime<Utc> },
    #[error("this drop admits only members whose email is verified")]
    EmailNotVerified,
}

impl Ineligible {
    /// The refusal's stable `code`.
    pub const fn code(&self) -> &'static str {
        match self {
            Ineligible::AccountTooNew { .. } => codes::ACCOUNT_TOO_NEW,
            Ineligible::EmailNotVerified => codes::EMAIL_NOT_VERIFIED,
        }
    }

    /// The rule that refused.
    pub const fn rule(&self) -> RuleKind {
        match self {
            Ineligible::AccountTooNew { .. } => RuleKind::AccountCreatedBefore,
            Ineligible::EmailNotVerified => RuleKind::EmailVerified,
        }
    }
}

/// Judges a member against a product's rules: the first rule it fails, or `Ok`.
pub fn judge(rules: &[EligibilityRule], member: &MemberFacts) -> Result<(), Ineligible> {
    for rule in rules {
        match *rule {
            EligibilityRule::AccountCreatedBefore { at } => {
                if member.created_at.is_none_or(|created| created >= at) {
                    return Err(Ineligible::AccountTooNew { at });
                }
            }
            EligibilityRule::EmailVerified => {
                if !member.email_verified {
                    return Err(Ineligible::EmailNotVerified);
                }
            }
        }
    }
    Ok(())
}

/// A product's rules as it keeps them: one of each kind, in the order first given.
/// Every rule must hold, so rules of one kind given twice are one: two "created before"
/// rules are the earlier (both hold exactly when it does), a repeated "email verified"
/// is the same rule. More than [`MAX_GIVEN`] given is an error, the message for
/// `INVALID_ELIGIBILITY`.
pub fn normalize(rules: &[EligibilityRule]) -> Result<Vec<EligibilityRule>, String> {
    if rules.len() > MAX_GIVEN {
        return Err(format!("at most {MAX_GIVEN} eligibility rules"));
    }
    let mut kept: Vec<EligibilityRule> = Vec::with_capacity(MAX_RULES);
    for rule in rules {
        match kept.iter_mut().find(|k| k.kind() == rule.kind()) {
            Some(EligibilityRule::AccountCreatedBefore { at: kept_at }) => {
                if let EligibilityRule::AccountCreatedBefore { at } = rule {
                    *kept_at = (*kept_at).min(*at);
                }
            }
            Some(EligibilityRule::EmailVerified) => {}
            None => kept.push(*rule),
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member_at(ms: i64) -> MemberId {
        MemberId::parse(member_id_signed_up_at(at(ms))).unwrap()
    }

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap()
    }

    #[test]
    fn a_v7_member_id_tells_when_the_member_signed_up() {
        let created = MemberFacts::created_at_of(&member_at(1_765_000_000_123));
        assert_eq!(created, Some(at(1_765_000_000_123)));
        let v4 = MemberId::parse(Uuid::new_v4().to_string()).unwrap();
        assert_eq!(MemberFacts::created_at_of(&v4), None);
        assert_eq!(
            MemberFacts::created_at_of(&MemberId::parse("member-1").unwrap()),
            None
        );
    }

    #[test]
    fn only_accounts_made_strictly_before_the_time_pass() {
        let rules = [EligibilityRule::AccountCreatedBefore { at: at(2_000) }];
        let judged = |ms| judge(&rules, &facts(member_at(ms), false));
        assert_eq!(judged(1_999), Ok(()));
        let refused = judged(2_000).unwrap_err();
        assert_eq!(refused, Ineligible::AccountTooNew { at: at(2_000) });
        assert_eq!(refused.code(), codes::ACCOUNT_TOO_NEW);
        assert_eq!(
            judged(5_000),
            Err(Ineligible::AccountTooNew { at: at(2_000) })
        );
        // Unknown age does not pass; no rules admit everyone.
        let unknown = MemberFacts {
            created_at: None,
            email_verified: true,
        };
        assert!(judge(&rules, &unknown).is_err());
        assert_eq!(judge(&[], &unknown), Ok(()));
    }

    #[test]
    fn only_verified_emails_pass_the_email_rule_and_every_rule_is_judged() {
        let rules = [
            EligibilityRule::AccountCreatedBefore { at: at(2_000) },
            EligibilityRule::EmailVerified,
        ];
        assert_eq!(judge(&rules, &facts(member_at(1_000), true)), Ok(()));
        let refused = judge(&rules, &facts(member_at(1_000), false)).unwrap_err();
        assert_eq!(refused, Ineligible::EmailNotVerified);
        assert_eq!(refused.code(), codes::EMAIL_NOT_VERIFIED);
        assert_eq!(refused.rule().label(), "email_verified");
        // The first rule failed is the answer.
        assert_eq!(
            judge(&rules, &facts(member_at(5_000), false)),
            Err(Ineligible::AccountTooNew { at: at(2_000) })
        );
    }

    fn facts(member: MemberId, email_verified: bool) -> MemberFacts {
        MemberFacts::of(&BuyerIdentity {
            member,
            email_verified,
        })
    }

    #[test]
    fn rules_read_and_write_with_their_tag_and_each_kind_once() {
        let rule: EligibilityRule = serde_json::from_str(
            r#"{"rule":"ACCOUNT_CREATED_BEFORE","at":"2026-12-01T09:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(
            rule,
            EligibilityRule::AccountCreatedBefore {
                at: "2026-12-01T09:00:00Z".parse().unwrap()
            }
        );
        assert!(serde_json::from_str::<EligibilityRule>(r#"{"rule":"NOPE"}"#).is_err());
        let email: EligibilityRule = serde_json::from_str(r#"{"rule":"EMAIL_VERIFIED"}"#).unwrap();
        assert_eq!(email, EligibilityRule::EmailVerified);
        assert_eq!(
            serde_json::to_string(&email).unwrap(),
            r#"{"rule":"EMAIL_VERIFIED"}"#
        );
        assert_eq!(normalize(&[rule]), Ok(vec![rule]));
        assert_eq!(normalize(&[rule, email]), Ok(vec![rule, email]));
        assert_eq!(normalize(&[email, email, email]), Ok(vec![email]));
        let earlier = EligibilityRule::AccountCreatedBefore {
            at: DateTime::from_timestamp_millis(1_000).unwrap(),
        };
        assert_eq!(
            normalize(&[email, rule, earlier, rule]),
            Ok(vec![email, earlier]),
            "two created-before rules are the earlier"
        );
        assert!(normalize(&[email; MAX_GIVEN]).is_ok());
        assert!(normalize(&[email; MAX_GIVEN + 1]).is_err());
    }
}
