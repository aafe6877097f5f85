//! A payment's trace id, as the timeline shows it: taken from its W3C `traceparent`.

/// The trace id of a `traceparent` (`version-traceid-parentid-flags`), if well formed.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    let id = traceparent.split('-').nth(1)?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) && id.bytes().any(|b| b != b'0'))
        .then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_id_is_taken_only_from_a_well_formed_traceparent() {
        assert_eq!(
            trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for bad in [
            "",
            "00",
            "00-xyz-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            assert_eq!(trace_id(bad), None, "{bad}");
        }
    }
}
