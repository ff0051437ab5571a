//! Media interfaces for telephony legs, as rtpengine configures them (`--interface
//! [NAME/]LOCAL[!ADVERTISED]`): each a local address legs' ports are bound on and the address
//! SDP announces for them, grouped by name (an unnamed one is `default`). A name may hold an
//! IPv4 and an IPv6 address; a side of a call gets a name (the ng `direction` flag, else the
//! first name) and, within it, the family its SDP or the `address-family` flag asks for.

use std::fmt;
use std::net::IpAddr;

/// One address of an interface.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Interface {
    /// The interface's name (`default` when none is given).
    pub name: String,
    /// Where legs' ports are bound.
    pub local: IpAddr,
    /// What SDP announces.
    pub advertised: IpAddr,
}

/// Why an interface does not parse (the spec, and what is wrong with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceError(pub String);

impl fmt::Display for InterfaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "interfaces: {}", self.0)
    }
}

impl std::error::Error for InterfaceError {}

impl Interface {
    /// `[NAME/]LOCAL[!ADVERTISED]`.
    pub fn parse(spec: &str) -> Result<Interface, InterfaceError> {
        let spec = spec.trim();
        let (name, rest) = match spec.split_once('/') {
            // An IPv6 address has no '/'; a name has no ':'.
            Some((n, r)) if !n.contains(':') && !n.is_empty() => (n, r),
            _ => ("default", spec),
        };
        let (local, advertised) = rest.split_once('!').unwrap_or((rest, rest));
        let ip = |s: &str| {
            s.trim()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .map_err(|e| InterfaceError(format!("{spec:?}: {s:?}: {e}")))
        };
        let (local, advertised) = (ip(local)?, ip(advertised)?);
        if local.is_ipv4() != advertised.is_ipv4() {
            return Err(InterfaceError(format!(
                "{spec:?}: the local and advertised addresses are of different families"
            )));
        }
        Ok(Interface {
            name: name.to_owned(),
            local,
            advertised,
        })
    }
}

/// The configured interfaces, or the one of `udp` announced as `announce` when none are.
pub fn configured(
    specs: &[String],
    udp: IpAddr,
    announce: IpAddr,
) -> Result<Vec<Interface>, InterfaceError> {
    if specs.is_empty() {
        return Ok(vec![Interface {
            name: "default".into(),
            local: udp,
            advertised: announce,
        }]);
    }
    specs.iter().map(|s| Interface::parse(s)).collect()
}

/// The interface a side gets: of `name` (else the first's name), of `v6`'s family when it has
/// one (else the name's first): its index.
pub fn choose(interfaces: &[Interface], name: Option<&str>, v6: Option<bool>) -> usize {
    let name = name
        .filter(|n| interfaces.iter().any(|i| i.name == *n))
        .or_else(|| interfaces.first().map(|i| i.name.as_str()))
        .unwrap_or("default");
    let named = || {
        interfaces
            .iter()
            .enumerate()
            .filter(|(_, i)| i.name == name)
    };
    v6.and_then(|v6| named().find(|(_, i)| i.local.is_ipv6() == v6))
        .or_else(|| named().next())
        .map_or(0, |(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_read_as_rtpengine_writes_them_and_name_what_is_wrong() {
        let i = Interface::parse("external/192.168.1.5!203.0.113.7").unwrap();
        assert_eq!(i.name, "external");
        assert_eq!(i.local, "192.168.1.5".parse::<IpAddr>().unwrap());
        assert_eq!(i.advertised, "203.0.113.7".parse::<IpAddr>().unwrap());
        let i = Interface::parse("::1!2001:db8::1").unwrap();
        assert_eq!(i.name, "default");
        assert!(i.local.is_ipv6());
        let e = Interface::parse("x/10.0.0.1!2001:db8::1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("families"), "{e}");
        let e = Interface::parse("int/ten").unwrap_err().to_string();
        assert!(e.contains("\"ten\""), "{e}");
    }

    #[test]
    fn a_side_gets_its_name_and_family() {
        let list: Vec<Interface> = ["a/127.0.0.1", "a/::1", "b/127.0.0.2"]
            .iter()
            .map(|s| Interface::parse(s).unwrap())
            .collect();
        assert_eq!(choose(&list, None, None), 0);
        assert_eq!(choose(&list, None, Some(true)), 1);
        assert_eq!(choose(&list, Some("b"), Some(true)), 2);
        assert_eq!(choose(&list, Some("nope"), None), 0);
    }
}
