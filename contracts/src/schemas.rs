//! Field schemas several request bodies share, each written from one rule so the
//! published documents cannot drift apart.

use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

/// The longest email address taken (RFC 5321's path limit less the brackets).
pub const MAX_EMAIL_LEN: usize = 254;

/// An email address as the member service takes one: printable ASCII around one `@`,
/// a domain of dot-separated labels, spaces at either end trimmed.
pub fn member_email() -> Object {
    email(&[])
}

/// An email address as staff accounts take one: a member's, without `:` (it names the
/// second factor in an authenticator app's `otpauth://` label).
pub fn staff_email() -> Object {
    email(b":")
}

fn email(also_refused: &[u8]) -> Object {
    let local = printable_except(&[b"@".as_slice(), also_refused].concat());
    let label = printable_except(&[b"@.".as_slice(), also_refused].concat());
    ObjectBuilder::new()
        .schema_type(Type::String)
        .examples(["ada@example.com"])
        .max_length(Some(MAX_EMAIL_LEN))
        .pattern(Some(format!(
            r"^[ \t\r\n]*{local}+@{label}+(\.{label}+)+[ \t\r\n]*$"
        )))
        .build()
}

/// A character class of printable ASCII (`!` to `~`) less `refused`, as `\xNN` ranges.
fn printable_except(refused: &[u8]) -> String {
    let mut class = String::from("[");
    let mut run: Option<(u8, u8)> = None;
    for b in 0x21..=0x7e_u8 {
        if refused.contains(&b) {
            if let Some((first, last)) = run.take() {
                class.push_str(&format!(r"\x{first:02x}-\x{last:02x}"));
            }
        } else {
            run = Some((run.map_or(b, |(first, _)| first), b));
        }
    }
    if let Some((first, last)) = run {
        class.push_str(&format!(r"\x{first:02x}-\x{last:02x}"));
    }
    class.push(']');
    class
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(o: Object) -> String {
        o.pattern.expect("a pattern")
    }

    #[test]
    fn email_patterns_refuse_what_each_service_refuses() {
        assert_eq!(
            pattern(member_email()),
            r"^[ \t\r\n]*[\x21-\x3f\x41-\x7e]+@[\x21-\x2d\x2f-\x3f\x41-\x7e]+(\.[\x21-\x2d\x2f-\x3f\x41-\x7e]+)+[ \t\r\n]*$"
        );
        assert_eq!(
            pattern(staff_email()),
            r"^[ \t\r\n]*[\x21-\x39\x3b-\x3f\x41-\x7e]+@[\x21-\x2d\x2f-\x39\x3b-\x3f\x41-\x7e]+(\.[\x21-\x2d\x2f-\x39\x3b-\x3f\x41-\x7e]+)+[ \t\r\n]*$"
        );
    }
}
