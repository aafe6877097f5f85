//! Where deliveries may go: the networks a webhook must not reach (the host's own,
//! private, link-local with the cloud metadata address, unique-local, multicast,
//! reserved), checked on a literal address at registration and on every resolved
//! address when connecting, unless `WEBHOOK_ALLOW_PRIVATE_TARGETS` allows them.

use std::{
    future::Future,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    pin::Pin,
    sync::{Arc, LazyLock},
};

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// IPv4 networks no delivery may reach: they name this host, its neighbours or nothing
/// routable, so a URL pointing there can only probe the inside.
const FORBIDDEN_V4: [&str; 16] = [
    "0.0.0.0/8",          // "this network", the unspecified address
    "10.0.0.0/8",         // private
    "100.64.0.0/10",      // carrier-grade NAT
    "127.0.0.0/8",        // loopback
    "169.254.0.0/16",     // link-local, with the cloud metadata service 169.254.169.254
    "172.16.0.0/12",      // private
    "192.0.0.0/24",       // IETF protocol assignments
    "192.0.2.0/24",       // documentation (TEST-NET-1)
    "192.88.99.0/24",     // 6to4 relay anycast
    "192.168.0.0/16",     // private
    "198.18.0.0/15",      // benchmarking
    "198.51.100.0/24",    // documentation (TEST-NET-2)
    "203.0.113.0/24",     // documentation (TEST-NET-3)
    "224.0.0.0/4",        // multicast
    "240.0.0.0/4",        // reserved, with the broadcast address 255.255.255.255
    "255.255.255.255/32", // limited broadcast (inside 240/4; named for the reader)
];

/// IPv6 networks no delivery may reach. The ones that embed an IPv4 address (mapped,
/// compatible, NAT64, 6to4) are judged by that address instead ([`embedded_v4`]).
const FORBIDDEN_V6: [&str; 9] = [
    "::/128",        // unspecified
    "::1/128",       // loopback
    "100::/64",      // discard-only
    "2001:db8::/32", // documentation
    "2001::/32",     // Teredo: the far end is an IPv4 address in disguise
    "fc00::/7",      // unique-local
    "fe80::/10",     // link-local
    "fec0::/10",     // site-local (deprecated, still routed inside some networks)
    "ff00::/8",      // multicast
];

static FORBIDDEN: LazyLock<Vec<IpNet>> = LazyLock::new(|| {
    FORBIDDEN_V4
        .iter()
        .chain(FORBIDDEN_V6.iter())
        .map(|n| n.parse().expect("a constant network"))
        .collect()
});

/// The IPv4 address an IPv6 address stands for, if it is one of the forms that carry
/// one: IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d` (deprecated; `::`
/// and `::1` are judged as IPv6), NAT64 `64:ff9b::a.b.c.d` and `64:ff9b:1::/48`, and
/// 6to4 `2002:aabb:ccdd::/48`.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low),
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x64, 0xff9b, 1, ..] => Some(low),
        [0x2002, a, b, ..] => Some(Ipv4Addr::new(
            (a >> 8) as u8,
            a as u8,
            (b >> 8) as u8,
            b as u8,
        )),
        _ => None,
    }
}

/// Whether `ip` lies in a network no delivery may reach (an IPv6 form carrying an
/// IPv4 address is judged by that address).
pub fn forbidden(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    };
    FORBIDDEN.iter().any(|n| n.contains(&ip))
}

/// The egress rule deliveries follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Egress {
    /// `WEBHOOK_ALLOW_PRIVATE_TARGETS`: every address may be reached (development and
    /// tests, whose receivers listen on 127.0.0.1).
    pub allow_private: bool,
}

impl Egress {
    /// Whether a delivery may connect to `ip`.
    pub fn permits(self, ip: IpAddr) -> bool {
        self.allow_private || !forbidden(ip)
    }

    /// A resolver for the delivery client that drops the addresses this rule forbids.
    pub fn resolver(self) -> Arc<GuardedResolver> {
        Arc::new(GuardedResolver { egress: self })
    }
}

/// A name resolved only to addresses deliveries may not reach; nothing was connected.
#[derive(Debug, thiserror::Error)]
#[error("every address the name resolves to is forbidden")]
pub struct ForbiddenAddress;

/// The name did not resolve (the system resolver's error is not kept: it is the
/// operator's class of failure, not its text, that is shown).
#[derive(Debug, thiserror::Error)]
#[error("the name did not resolve")]
pub struct NotResolved;

/// The system resolver, with the addresses [`Egress`] forbids dropped: a name whose
/// every address is forbidden fails with [`ForbiddenAddress`], so the connector never
/// dials it. This is the check that holds whatever the name resolved to at
/// registration (a name may change its answer, or answer differently each time).
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    egress: Egress,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let egress = self.egress;
        let host = name.as_str().to_owned();
        let lookup: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|_| Box::new(NotResolved) as Box<dyn std::error::Error + Send + Sync>)?
                .collect();
            if found.is_empty() {
                return Err(Box::new(NotResolved) as Box<dyn std::error::Error + Send + Sync>);
            }
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| egress.permits(a.ip()))
                .collect();
            if allowed.is_empty() {
                tracing::info!(host, "webhook host resolves only to forbidden addresses");
                return Err(Box::new(ForbiddenAddress) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        });
        lookup
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn internal_addresses_are_forbidden_in_every_spelling() {
        for bad in [
            "127.0.0.1",
            "127.255.255.254",
            "0.0.0.0",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.2.10",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            // IPv4-mapped and -compatible forms of the loopback, metadata and private.
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "::10.1.2.3",
            // NAT64 and 6to4 wrappings of internal IPv4.
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
        ] {
            assert!(forbidden(ip(bad)), "{bad} must be forbidden");
            assert!(!Egress::default().permits(ip(bad)), "{bad}");
            assert!(
                Egress {
                    allow_private: true
                }
                .permits(ip(bad)),
                "{bad} allowed when private targets are"
            );
        }
    }

    #[test]
    fn public_addresses_are_not() {
        for good in [
            "93.184.216.34",
            "8.8.8.8",
            "1.1.1.1",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.0.1",
            "2606:4700:4700::1111",
            "::ffff:93.184.216.34",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(!forbidden(ip(good)), "{good} must be allowed");
        }
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_by_the_resolver() {
        let name: Name = "localhost".parse().expect("a name");
        let refused = Egress::default()
            .resolver()
            .resolve(name)
            .await
            .err()
            .expect("refused");
        assert!(refused.is::<ForbiddenAddress>(), "{refused}");
        let name: Name = "localhost".parse().expect("a name");
        let allowed = Egress {
            allow_private: true,
        }
        .resolver()
        .resolve(name)
        .await
        .map(|a| a.map(|a| a.ip()).collect::<Vec<_>>())
        .expect("resolves");
        assert!(allowed.iter().all(IpAddr::is_loopback), "{allowed:?}");
    }
}
