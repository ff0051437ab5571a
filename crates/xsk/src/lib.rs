//! secrelay's AF_XDP media path: a worker reads and writes raw Ethernet frames through an XDP
//! socket ([`Xsk`]) bound to one receive queue of an interface, where the XDP filter
//! (`secrelay-xdp`) redirects the media ports' admitted datagrams, past the kernel's IP and UDP
//! layers and its sockets.
//!
//! - [`Xsk`]: the socket, its UMEM (the frames the kernel and the worker share) and its four
//!   rings; frames lent out only as borrows, a transmitted frame's memory kept until the
//!   kernel completes it.
//! - [`frame`]: Ethernet, IPv4/IPv6 and UDP headers read (every length and checksum checked:
//!   a frame is untrusted input) and written.
//! - [`neigh`]: the MAC address of a destination's next hop (IPv4 or IPv6), from the kernel's
//!   route and neighbour tables ([`netlink`] reads IPv6's); what it cannot resolve the caller
//!   sends through its socket, which makes the kernel resolve it.
//!
//! Opening a socket needs `CAP_NET_RAW` (and the filter's capabilities to redirect to it).

pub mod frame;
pub mod neigh;
pub mod netlink;
mod socket;

pub use socket::{Config, Mode, Statistics, TxError, Xsk};

mod ifreq;
pub use ifreq::{hardware_address, set_tx_checksum_offload};
