//! The client's address behind a list of trusted proxies (`TRUSTED_PROXIES`): the
//! connection's peer, unless the peer is a trusted proxy; then the rightmost hop of
//! `X-Forwarded-For` that is not one, since every hop to its right was appended by a
//! proxy that is trusted and every hop to its left was written by the client.

use std::{fmt, net::IpAddr, str::FromStr};

use ipnet::IpNet;

/// The proxies whose `X-Forwarded-For` is believed: addresses and networks, parsed once
/// at start. Empty by default: the header is then never read.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

/// An entry of `TRUSTED_PROXIES` that is neither an address nor a network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("entry {index} ({entry:?}) is neither an IP address nor a CIDR network")]
pub struct InvalidProxy {
    pub index: usize,
    pub entry: String,
}

impl TrustedProxies {
    pub fn new(networks: Vec<IpNet>) -> Self {
        Self(networks)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn networks(&self) -> &[IpNet] {
        &self.0
    }

    /// Whether `ip` is one of the proxies (an IPv4-mapped IPv6 peer counts as its IPv4
    /// address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client's address for a connection from `peer` carrying the `X-Forwarded-For`
    /// values `forwarded` (each one header line, in order; `None` for a line that is not
    /// text). A peer that is no trusted proxy is the client, whatever the header says.
    /// From a trusted peer the hops are walked from the right: the first that is not a
    /// trusted proxy is the client; when all are trusted, the leftmost. A hop that is
    /// not an address ends the walk at the last address read, the nearest proxy to it.
    pub fn client_of<'a>(
        &self,
        peer: IpAddr,
        forwarded: impl DoubleEndedIterator<Item = Option<&'a str>>,
    ) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.contains(client) {
            return client;
        }
        let hops = forwarded
            .rev()
            .flat_map(|line| line.unwrap_or("\0").rsplit(','));
        for hop in hops {
            let Some(ip) = parse_hop(hop) else { break };
            client = ip;
            if !self.contains(ip) {
                break;
            }
        }
        client
    }
}

/// One `X-Forwarded-For` hop: an address, or an address with a port
/// (`198.51.100.7:4711`, `[2001:db8::1]:4711`), as some proxies write it.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    hop.parse::<IpAddr>()
        .or_else(|_| hop.parse::<std::net::SocketAddr>().map(|s| s.ip()))
        .ok()
        .map(|ip| ip.to_canonical())
}

impl FromStr for TrustedProxies {
    type Err = InvalidProxy;

    /// Comma-separated addresses (`10.0.0.7`, `::1`) and CIDR networks (`10.0.0.0/8`,
    /// `fd00::/8`); blank entries are skipped, so an empty list trusts no one.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .enumerate()
            .map(|(i, entry)| {
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map(|net| net.trunc())
                    .map_err(|_| InvalidProxy {
                        index: i + 1,
                        entry: entry.to_owned(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }
}

impl fmt::Debug for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(ToString::to_string))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn client(proxies: &str, peer: &str, lines: &[&str]) -> IpAddr {
        let proxies: TrustedProxies = proxies.parse().unwrap();
        proxies.client_of(ip(peer), lines.iter().map(|l| Some(*l)))
    }

    #[test]
    fn lists_parse_addresses_and_networks_and_refuse_junk() {
        let p: TrustedProxies = " 10.0.0.7, 192.168.0.0/16 ,,::1, fd00::/8, 172.16.3.9/12"
            .parse()
            .unwrap();
        assert_eq!(
            format!("{p:?}"),
            r#"["10.0.0.7/32", "192.168.0.0/16", "::1/128", "fd00::/8", "172.16.0.0/12"]"#
        );
        assert!("".parse::<TrustedProxies>().unwrap().is_empty());
        assert!(" , ".parse::<TrustedProxies>().unwrap().is_empty());
        for junk in [
            "10.0.0.300",
            "10.0.0.0/33",
            "proxy.internal",
            "10.0.0.1 10.0.0.2",
            "*",
        ] {
            let e = format!("10.0.0.1,{junk}")
                .parse::<TrustedProxies>()
                .unwrap_err();
            assert_eq!(e.index, 2, "{junk}");
            assert_eq!(e.entry, junk);
        }
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_the_header_says() {
        assert_eq!(
            client("", "203.0.113.5", &["198.51.100.7"]),
            ip("203.0.113.5")
        );
        assert_eq!(
            client("10.0.0.0/8", "203.0.113.5", &["10.0.0.1"]),
            ip("203.0.113.5")
        );
        assert_eq!(client("10.0.0.0/8", "::ffff:10.0.0.3", &[]), ip("10.0.0.3"));
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_hop_is_the_client() {
        let proxies = "10.0.0.0/8, 192.0.2.1";
        // The client wrote the leftmost hop itself: it is never believed over the
        // hop the proxies appended.
        assert_eq!(
            client(
                proxies,
                "10.0.0.2",
                &["6.6.6.6, 198.51.100.7, 192.0.2.1, 10.0.0.9"]
            ),
            ip("198.51.100.7")
        );
        // The same across several header lines, in order.
        assert_eq!(
            client(
                proxies,
                "10.0.0.2",
                &["6.6.6.6", "198.51.100.7,192.0.2.1", "10.0.0.9"]
            ),
            ip("198.51.100.7")
        );
        // No header: the proxy itself.
        assert_eq!(client(proxies, "10.0.0.2", &[]), ip("10.0.0.2"));
        // Every hop a proxy: the leftmost.
        assert_eq!(
            client(proxies, "10.0.0.2", &["10.1.1.1, 192.0.2.1"]),
            ip("10.1.1.1")
        );
        // Ports and brackets are read; IPv6 too.
        assert_eq!(
            client(proxies, "10.0.0.2", &["[2001:db8::7]:4711, 10.0.0.9:80"]),
            ip("2001:db8::7")
        );
    }

    #[test]
    fn a_hop_that_is_no_address_ends_the_walk_at_the_nearest_proxy() {
        let proxies = "10.0.0.0/8";
        assert_eq!(
            client(proxies, "10.0.0.2", &["198.51.100.7, junk, 10.0.0.9"]),
            ip("10.0.0.9")
        );
        assert_eq!(client(proxies, "10.0.0.2", &["unknown"]), ip("10.0.0.2"));
        assert_eq!(client(proxies, "10.0.0.2", &[""]), ip("10.0.0.2"));
        assert_eq!(
            client(proxies, "10.0.0.2", &["198.51.100.7,"]),
            ip("10.0.0.2")
        );
        let p: TrustedProxies = proxies.parse().unwrap();
        let lines = [Some("198.51.100.7"), None, Some("10.0.0.9")];
        assert_eq!(
            p.client_of(ip("10.0.0.2"), lines.into_iter()),
            ip("10.0.0.9")
        );
        let long = vec!["10.0.0.1"; 10_000].join(",");
        assert_eq!(client(proxies, "10.0.0.2", &[&long]), ip("10.0.0.1"));
    }
}
