//! What the AF_XDP path asks of an interface through its `ifreq` ioctls, which answer for the
//! caller's network namespace (unlike `/sys/class/net`, which shows the namespace it was
//! mounted in): its hardware address, and its transmit checksum offload.
//!
//! A sender on a veth pair hands its peer datagrams whose UDP checksum is not filled in yet
//! (the kernel's checksum offload: veth claims to compute it, and no hardware ever does). The
//! kernel's own receive path knows from the buffer's metadata and lets them pass; a frame
//! redirected to an AF_XDP socket carries no such metadata, so its checksum fails the
//! [`crate::frame`] check. The sending end of a veth pair in front of an AF_XDP path must
//! compute its checksums: this turns the offload off there (what tests and the lab do).

// The kernel interface: every `unsafe` block says why it is sound (`// SAFETY:`).
#![allow(unsafe_code)]

use std::io;

/// `SIOCETHTOOL`.
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `SIOCGIFHWADDR`.
const SIOCGIFHWADDR: libc::c_ulong = 0x8927;
/// `ETHTOOL_STXCSUM`: set transmit checksumming.
const ETHTOOL_STXCSUM: u32 = 0x17;

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `struct ifreq` with its `ifr_data` member.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut EthtoolValue,
    _pad: [u8; 16],
}

/// `struct ifreq` with its `ifr_hwaddr` member.
#[repr(C)]
struct IfReqHw {
    name: [libc::c_char; libc::IFNAMSIZ],
    family: u16,
    addr: [u8; 14],
    _pad: [u8; 8],
}

/// `interface` as `ifr_name`. Err: not a name the kernel could hold.
fn name(interface: &str) -> io::Result<[libc::c_char; libc::IFNAMSIZ]> {
    let bytes = interface.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{interface:?}: not an interface name"),
        ));
    }
    let mut n = [0; libc::IFNAMSIZ];
    for (d, s) in n.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(n)
}

/// Runs `request` on `req` through a throwaway datagram socket. Err: what the kernel said,
/// after `what`.
fn ioctl<T>(request: libc::c_ulong, req: &mut T, what: &str) -> io::Result<()> {
    // SAFETY: a datagram socket only to carry the ioctl, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `req` is a valid `ifreq` of the layout `request` takes (the callers' types),
    // alive and exclusively borrowed for the call; any pointer in it points at memory alive
    // for the call too.
    let r = unsafe { libc::ioctl(fd, request, req as *mut T) };
    let e = io::Error::last_os_error();
    // SAFETY: the socket opened above, closed once.
    unsafe { libc::close(fd) };
    if r < 0 {
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

/// Turns `interface`'s transmit checksum offload on or off (needs `CAP_NET_ADMIN`). Err: the
/// interface does not exist or the kernel refused, naming the interface.
pub fn set_tx_checksum_offload(interface: &str, on: bool) -> io::Result<()> {
    let mut value = EthtoolValue {
        cmd: ETHTOOL_STXCSUM,
        data: u32::from(on),
    };
    let mut req = IfReq {
        name: name(interface)?,
        data: &mut value,
        _pad: [0; 16],
    };
    ioctl(
        SIOCETHTOOL,
        &mut req,
        &format!("transmit checksum offload on {interface}"),
    )
}

/// `interface`'s Ethernet (MAC) address. Err: it does not exist, or has no Ethernet address,
/// naming it.
pub fn hardware_address(interface: &str) -> io::Result<[u8; 6]> {
    let mut req = IfReqHw {
        name: name(interface)?,
        family: 0,
        addr: [0; 14],
        _pad: [0; 8],
    };
    ioctl(
        SIOCGIFHWADDR,
        &mut req,
        &format!("the hardware address of {interface}"),
    )?;
    if req.family != libc::ARPHRD_ETHER {
        return Err(io::Error::other(format!(
            "{interface} is not an Ethernet interface (hardware type {})",
            req.family
        )));
    }
    let mut mac = [0; 6];
    mac.copy_from_slice(&req.addr[..6]);
    Ok(mac)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bad_name_is_refused_before_the_kernel() {
        let e = super::set_tx_checksum_offload("a-name-far-too-long", false).unwrap_err();
        assert!(e.to_string().contains("a-name-far-too-long"), "{e}");
        let e = super::hardware_address("").unwrap_err();
        assert!(e.to_string().contains("not an interface name"), "{e}");
    }

    #[test]
    fn loopback_is_not_ethernet_and_a_missing_interface_is_named() {
        let e = super::hardware_address("lo").unwrap_err();
        assert!(
            e.to_string().contains("lo is not an Ethernet interface"),
            "{e}"
        );
        let e = super::hardware_address("nosuchif0").unwrap_err();
        assert!(e.to_string().contains("nosuchif0"), "{e}");
    }
}
