//! What an endpoint's registration must satisfy: an `https://` or `http://` URL of the grammar
//! the OpenAPI schema states whose host, if an address, is one deliveries may reach;
//! event types from the catalogue; a bounded description; and the signing secret it is
//! given.

use paysaga_common::{error::codes as common_codes, ApiError};
use paysaga_contracts::events::types;
use rand::RngCore;

use crate::{
    egress::Egress,
    error::{Error, Result},
};

const MAX_URL_CHARS: usize = 2048;
const MAX_DESCRIPTION_CHARS: usize = 500;
const MAX_EVENT_TYPES: usize = 32;

/// The characters a path may hold (RFC 3986 unreserved, sub-delims, `:` `@` `/`); a
/// query may hold `?` too. Percent-escapes and anything else are refused.
fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "._~!$&'()*+,;=:@/-".contains(c)
}

/// `a` is a host name: dot-separated labels, each a lower-case letter then lower-case
/// letters and digits, single hyphens between them (so no `xn--` labels, which would
/// need IDNA decoding, and no hyphen at either end).
fn host_name(a: &str) -> bool {
    a.split('.').all(|label| {
        label.starts_with(|c: char| c.is_ascii_lowercase())
            && !label.ends_with('-')
            && !label.contains("--")
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    })
}

/// `a` is a dotted IPv4 address, each part 0-255 without leading zeros.
fn ipv4(a: &str) -> bool {
    let parts: Vec<&str> = a.split('.').collect();
    parts.len() == 4 && parts.iter().all(|p| decimal(p, 0, 255))
}

/// `p` is a decimal number in `min..=max` without leading zeros.
fn decimal(p: &str, min: u32, max: u32) -> bool {
    !p.is_empty()
        && p.len() <= 5
        && p.chars().all(|c| c.is_ascii_digit())
        && (p.len() == 1 || !p.starts_with('0'))
        && p.parse::<u32>().is_ok_and(|n| (min..=max).contains(&n))
}

/// The URL grammar the OpenAPI schema states (`CreateWebhookEndpoint::url`), checked
/// by hand: `https://` or `http://`, a host name or IPv4 address, an optional port
/// 1-65535, an optional path and query of plain characters.
fn plain_http_url(raw: &str) -> bool {
    let Some(rest) = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"))
    else {
        return false;
    };
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (host, port) = match authority.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    (host_name(host) || ipv4(host))
        && port.is_none_or(|p| decimal(p, 1, 65_535))
        && path.chars().all(path_char)
        && query.is_none_or(|q| q.chars().all(|c| c == '?' || path_char(c)))
}

/// An endpoint's URL, as deliveries will use it: `https://` (its certificate verified,
/// host name included) or `http://`, a lower-case host name or an IPv4 address, an
/// optional port, a path and query of plain characters (no credentials: they would show
/// in every listing, and the signature is what authenticates a delivery; no fragment,
/// no percent-escapes). A host that is an address `egress` forbids (loopback, private,
/// the metadata address, ...) is refused; a host name is checked on what it resolves to
/// at every delivery instead, since its answer may change.
pub fn check_url(raw: &str, egress: Egress) -> Result<String> {
    let bad = |why: &str| Error::UrlInvalid(why.to_owned());
    if raw.chars().count() > MAX_URL_CHARS {
        return Err(bad("longer than 2048 characters"));
    }
    if !plain_http_url(raw) {
        return Err(bad(
            "expected http(s)://<lower-case host name or IPv4 address>[:<port 1-65535>][/<path>][?<query>], \
             the path and query of letters, digits and ._~!$&'()*+,;=:@/- only",
        ));
    }
    let url = reqwest::Url::parse(raw).map_err(|e| bad(&format!("not a URL: {e}")))?;
    let host = url.host_str().unwrap_or_default();
    if host.is_empty() {
        return Err(bad("a host is required"));
    }
    if let Ok(ip) = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
    {
        if !egress.permits(ip) {
            return Err(Error::AddressForbidden(ip));
        }
    }
    Ok(url.to_string())
}

/// The subscribed types: each in the catalogue, each once, in catalogue order.
pub fn check_event_types(asked: &[String]) -> Result<Vec<String>> {
    if asked.len() > MAX_EVENT_TYPES {
        return Err(ApiError::unprocessable(
            common_codes::INVALID_BODY,
            format!("at most {MAX_EVENT_TYPES} event types"),
        )
        .into());
    }
    if let Some(unknown) = asked.iter().find(|t| !types::is_known(t)) {
        return Err(Error::EventTypeUnknown(unknown.clone()));
    }
    Ok(types::ALL
        .iter()
        .filter(|t| asked.iter().any(|a| a == *t))
        .map(|t| (*t).to_owned())
        .collect())
}

/// The endpoint's description for the operator: at most 500 characters.
pub fn check_description(description: Option<String>) -> Result<String> {
    let description = description.unwrap_or_default();
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(ApiError::unprocessable(
            common_codes::INVALID_BODY,
            format!("description: at most {MAX_DESCRIPTION_CHARS} characters"),
        )
        .into());
    }
    Ok(description)
}

/// A new endpoint's signing secret: `whsec_` and 32 random bytes from the operating
/// system, in hex.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("whsec_{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALLOW: Egress = Egress {
        allow_private: true,
    };

    #[test]
    fn only_http_and_https_urls_with_a_host_are_taken() {
        for good in [
            "http://127.0.0.1:9000/hook",
            "https://shipping.example.com/paysaga",
            "https://127.0.0.1:9443/hook?x=1",
            "http://shipping.example.com/paysaga?x=1",
            "http://localhost",
            "http://a-b.c0:65535/x/y;z=1?q=a/b?c",
            "http://0.0.0.0:1",
        ] {
            assert!(check_url(good, ALLOW).is_ok(), "{good}");
        }
        for bad in [
            "",
            "shipping.example.com/hook",
            "ftp://example.com/hook",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "http://user:pw@example.com/",
            "http://example.com/#frag",
            "http://",
            "https://",
            "https://user:pw@example.com/",
            "httpss://example.com/",
            "HTTPS://example.com/",
            "http://v7pq0z0pe-bjobcpmel*",
            "http://Example.com/",
            "http://999.0.0.1/",
            "http://01.2.3.4/",
            "http://a:0/",
            "http://a:65536/",
            "http://a/%41",
            "http://a/ b",
            "http://-a/",
            "http://a..b/",
            "http://a.xn--b/",
            "http://a-/",
        ] {
            assert!(
                matches!(check_url(bad, ALLOW), Err(Error::UrlInvalid(_))),
                "{bad}"
            );
        }
        let long = format!("http://example.com/{}", "a".repeat(2048));
        assert!(check_url(&long, ALLOW).is_err());
    }

    #[test]
    fn internal_addresses_are_refused_unless_private_targets_are_allowed() {
        for internal in [
            "http://127.0.0.1:5432/",
            "http://169.254.169.254/latest/meta-data/",
            "http://10.0.0.1/",
            "http://172.16.0.1/",
            "http://192.168.0.1:8080/hook",
            "http://100.64.0.1/",
            "http://0.0.0.0:1",
            "http://224.0.0.1/",
            "http://255.255.255.255/",
            "https://127.0.0.1:8443/",
            "https://169.254.169.254/latest/meta-data/",
        ] {
            assert!(
                matches!(
                    check_url(internal, Egress::default()),
                    Err(Error::AddressForbidden(_))
                ),
                "{internal}"
            );
            assert!(check_url(internal, ALLOW).is_ok(), "{internal}");
        }
        let refused = check_url("http://127.0.0.1:9/", Egress::default())
            .err()
            .and_then(|e| e.api())
            .expect("an API error");
        assert_eq!(refused.status, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(refused.code, "WEBHOOK_ADDRESS_FORBIDDEN");
        // Names are taken: what they resolve to is checked when delivering.
        for name in [
            "http://localhost:9/",
            "http://shipping.example.com/x",
            "http://93.184.216.34/",
        ] {
            assert!(check_url(name, Egress::default()).is_ok(), "{name}");
        }
    }

    /// The URL pattern the OpenAPI schema states, from the webhook API's document.
    fn schema_pattern() -> String {
        use utoipa::OpenApi;
        let doc = serde_json::to_value(crate::ApiDoc::openapi()).expect("serialises");
        doc["components"]["schemas"]["CreateWebhookEndpoint"]["properties"]["url"]["pattern"]
            .as_str()
            .expect("a pattern")
            .to_owned()
    }

    proptest::proptest! {
        /// Whatever the schema calls a valid URL is taken (a client that follows the
        /// schema is never refused); the hand-written refusals above cover the converse.
        #[test]
        fn every_url_the_schema_admits_is_taken(url in {
            let pattern = schema_pattern();
            let bare = pattern.trim_start_matches('^').trim_end_matches('$').to_owned();
            proptest::string::string_regex(&bare).expect("a pattern proptest can generate from")
        }) {
            proptest::prop_assert!(check_url(&url, ALLOW).is_ok(), "{url}: {:?}", check_url(&url, ALLOW).err());
        }
    }

    #[test]
    fn event_types_are_from_the_catalogue_once_each() {
        let asked = vec![
            "payment.refunded".to_owned(),
            "payment.completed".to_owned(),
            "payment.completed".to_owned(),
        ];
        assert_eq!(
            check_event_types(&asked).expect("known"),
            vec!["payment.completed", "payment.refunded"]
        );
        assert!(check_event_types(&[]).expect("empty").is_empty());
        assert!(matches!(
            check_event_types(&["payment.created".to_owned()]),
            Err(Error::EventTypeUnknown(_))
        ));
    }

    #[test]
    fn descriptions_are_bounded() {
        assert_eq!(check_description(None).expect("none"), "");
        assert!(check_description(Some("d".repeat(500))).is_ok());
        assert!(matches!(
            check_description(Some("d".repeat(501))),
            Err(Error::Api(e)) if e.code == common_codes::INVALID_BODY
        ));
    }

    #[test]
    fn secrets_are_whsec_and_32_random_bytes() {
        let a = new_secret();
        assert!(a.starts_with("whsec_") && a.len() == 6 + 64, "{a}");
        assert_ne!(a, new_secret());
    }
}
