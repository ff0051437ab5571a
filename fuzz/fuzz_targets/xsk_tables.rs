#![no_main]

//! What the AF_XDP path reads of the kernel's tables: an rtnetlink neighbour dump's bytes
//! (first byte odd) or /proc/net/ipv6_route's text (even). Never a panic, whatever the bytes;
//! the routes read find a next hop, or none, for any address.

use libfuzzer_sys::fuzz_target;
use secrelay_xsk::neigh::{next_hop6, parse_routes6};
use secrelay_xsk::netlink::parse_neighbours;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    if pick & 1 == 1 {
        let mut out = Vec::new();
        let _ = parse_neighbours(rest, u32::from(pick >> 1), &mut out);
        return;
    }
    let routes = parse_routes6(&String::from_utf8_lossy(rest));
    for r in &routes {
        let _ = next_hop6(&routes, r.dest);
    }
    let _ = next_hop6(&routes, std::net::Ipv6Addr::LOCALHOST);
});
