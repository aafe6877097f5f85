//! Email addresses: how they are normalised and what is accepted.

pub use paysaga_contracts::schemas::MAX_EMAIL_LEN;

/// A normalised email address: trimmed, lower-cased, and shaped like an address.
#[derive(Clone, PartialEq, Eq)]
pub struct Email(String);

impl Email {
    /// Trims spaces, tabs and line breaks from `raw`, then checks: at most 254
    /// characters, all printable ASCII (an address is one definition in the code and
    /// in the published schema's pattern, and look-alike letters from other scripts
    /// cannot make a second account that reads like the first), exactly one `@`, a
    /// non-empty local part, a domain with a dot and no empty label; then lower-cases
    /// it. `None` when it is not an address.
    pub fn parse(raw: &str) -> Option<Self> {
        let trimmed = raw.trim_matches([' ', '\t', '\r', '\n']);
        if trimmed.is_empty() || trimmed.len() > MAX_EMAIL_LEN {
            return None;
        }
        if !trimmed.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return None;
        }
        let email = trimmed.to_ascii_lowercase();
        let (local, domain) = email.split_once('@')?;
        if local.is_empty() || domain.contains('@') || !domain.contains('.') {
            return None;
        }
        if domain.split('.').any(str::is_empty) {
            return None;
        }
        Some(Self(email))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The part before the `@`.
    pub fn local_part(&self) -> &str {
        self.0.split_once('@').map_or("", |(local, _)| local)
    }

    /// What logs may show: the first character of the local part and the domain.
    pub fn masked(&self) -> String {
        match self.0.split_once('@') {
            Some((local, domain)) => {
                let first: String = local.chars().take(1).collect();
                format!("{first}***@{domain}")
            }
            None => "***".into(),
        }
    }
}

impl std::fmt::Debug for Email {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Email({})", self.masked())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_trimmed_and_lower_cased() {
        let e = Email::parse("  Foo.Bar@Example.COM ").unwrap();
        assert_eq!(e.as_str(), "foo.bar@example.com");
        assert_eq!(e.local_part(), "foo.bar");
        assert_eq!(e.masked(), "f***@example.com");
    }

    #[test]
    fn malformed_addresses_are_refused() {
        for bad in [
            "",
            "   ",
            "foo",
            "@example.com",
            "foo@",
            "foo@example",
            "foo@@example.com",
            "a@b@example.com",
            "foo@example..com",
            "foo@.example.com",
            "foo@example.com.",
            "fo o@example.com",
            "foo@exa\u{0}mple.com",
            "\u{1c}foo@example.com",
            "ｆoo@example.com",
            "foo@exämple.com",
        ] {
            assert!(Email::parse(bad).is_none(), "{bad:?} accepted");
        }
        let long = format!("{}@example.com", "a".repeat(MAX_EMAIL_LEN - 11));
        assert!(Email::parse(&long).is_none());
        let fits = format!("{}@example.com", "a".repeat(MAX_EMAIL_LEN - 12));
        assert!(Email::parse(&fits).is_some());
    }
}
