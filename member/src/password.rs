//! Passwords: the policy and the Argon2id hashing every service that keeps passwords
//! shares (`paysaga_common::password`), with a member's email as the policy sees it.

pub use paysaga_common::password::{HashError, Passwords, Rule, MAX_LEN, MIN_LEN};

use crate::email::Email;

/// Checks a new password against the shared policy, with the member's email.
pub fn check(password: &str, email: Option<&Email>) -> Result<(), Rule> {
    paysaga_common::password::check(password, email.map(Email::local_part))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::codes;

    #[test]
    fn the_shared_rules_answer_the_member_contracts_codes() {
        for (rule, code) in [
            (Rule::TooShort, codes::PASSWORD_TOO_SHORT),
            (Rule::TooLong, codes::PASSWORD_TOO_LONG),
            (Rule::ContainsEmail, codes::PASSWORD_CONTAINS_EMAIL),
            (Rule::TooCommon, codes::PASSWORD_TOO_COMMON),
        ] {
            assert_eq!(rule.code(), code);
        }
        let e = Email::parse("marguerite@example.com").unwrap();
        assert_eq!(
            check("my-MARGUERITE-pass", Some(&e)),
            Err(Rule::ContainsEmail)
        );
    }
}
