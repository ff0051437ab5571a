//! Hand-built frames and capture files for the integration tests, with
//! checksums computed independently of the crate (and of etherparse).
#![allow(dead_code, missing_docs)]

use std::net::{Ipv4Addr, Ipv6Addr};

/// RFC 1071 Internet checksum: one's complement of the one's complement sum.
pub fn inet_sum(chunks: &[&[u8]]) -> u16 {
    let mut sum: u64 = 0;
    let mut carry_byte: Option<u8> = None;
    for chunk in chunks {
        for &b in *chunk {
            match carry_byte.take() {
                None => carry_byte = Some(b),
                Some(hi) => sum += u64::from(u16::from_be_bytes([hi, b])),
            }
        }
    }
    if let Some(hi) = carry_byte {
        sum += u64::from(u16::from_be_bytes([hi, 0]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

pub fn udp_checksum_v4(src: Ipv4Addr, dst: Ipv4Addr, udp_segment: &[u8]) -> u16 {
    let len = (udp_segment.len() as u16).to_be_bytes();
    let pseudo = [&src.octets()[..], &dst.octets()[..], &[0, 17], &len[..]].concat();
    let c = inet_sum(&[&pseudo, udp_segment]);
    if c == 0 {
        0xffff
    } else {
        c
    }
}

pub fn udp_checksum_v6(src: Ipv6Addr, dst: Ipv6Addr, udp_segment: &[u8]) -> u16 {
    let len = (udp_segment.len() as u32).to_be_bytes();
    let pseudo = [
        &src.octets()[..],
        &dst.octets()[..],
        &len[..],
        &[0, 0, 0, 17],
    ]
    .concat();
    let c = inet_sum(&[&pseudo, udp_segment]);
    if c == 0 {
        0xffff
    } else {
        c
    }
}

/// UDP header + payload with the checksum filled in (or 0).
fn udp_segment(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// IPv4 + UDP. `options` must be a multiple of 4 bytes.
pub fn ipv4_udp(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    payload: &[u8],
    udp_checksum: bool,
    options: &[u8],
) -> Vec<u8> {
    assert!(options.len().is_multiple_of(4));
    let mut udp = udp_segment(sport, dport, payload);
    if udp_checksum {
        let c = udp_checksum_v4(src, dst, &udp);
        udp[6..8].copy_from_slice(&c.to_be_bytes());
    }
    ipv4_with_protocol(src, dst, 17, &udp, options, 0)
}

/// An IPv4 header (with `flags_frag` as the flags/fragment-offset word) and
/// the given payload.
pub fn ipv4_with_protocol(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: u8,
    payload: &[u8],
    options: &[u8],
    flags_frag: u16,
) -> Vec<u8> {
    let ihl = 5 + options.len() / 4;
    let total = ihl * 4 + payload.len();
    let mut h = vec![
        0x40 | ihl as u8,
        0xb8, // DSCP EF
        (total >> 8) as u8,
        total as u8,
        0x12,
        0x34,
        (flags_frag >> 8) as u8,
        flags_frag as u8,
        64,
        protocol,
        0,
        0,
    ];
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(options);
    let c = inet_sum(&[&h]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

/// IPv6 + optional extension headers (each given as (its own next-header
/// type code, bytes with the next-header byte to be patched)) + UDP.
pub fn ipv6_udp(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    sport: u16,
    dport: u16,
    payload: &[u8],
    exts: &[(u8, Vec<u8>)],
) -> Vec<u8> {
    let mut udp = udp_segment(sport, dport, payload);
    let c = udp_checksum_v6(src, dst, &udp);
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    let mut chain = Vec::new();
    for (i, (_, bytes)) in exts.iter().enumerate() {
        let mut b = bytes.clone();
        b[0] = exts.get(i + 1).map_or(17, |(t, _)| *t);
        chain.extend_from_slice(&b);
    }
    let first = exts.first().map_or(17, |(t, _)| *t);
    ipv6_raw(src, dst, first, &[chain, udp].concat())
}

pub fn ipv6_raw(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0x00, 0x00, 0x00];
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.push(next_header);
    h.push(64);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(payload);
    h
}

/// 8-byte hop-by-hop options header with a PadN option (next header
/// patched by [`ipv6_udp`]).
pub fn hop_by_hop() -> (u8, Vec<u8>) {
    (0, vec![0, 0, 1, 4, 0, 0, 0, 0])
}

/// 8-byte destination options header.
pub fn dest_opts() -> (u8, Vec<u8>) {
    (60, vec![0, 0, 1, 4, 0, 0, 0, 0])
}

/// Ethernet II with the given (TPID, TCI) tags.
pub fn ethernet(tags: &[(u16, u16)], ether_type: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02];
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ether_type.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Linux cooked capture v1 header (outgoing, ARPHRD_ETHER).
pub fn sll(protocol: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0, 4, 0, 1, 0, 6, 0x02, 0, 0, 0, 0, 0x01, 0, 0];
    f.extend_from_slice(&protocol.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Linux cooked capture v2 header.
pub fn sll2(protocol: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&protocol.to_be_bytes());
    f.extend_from_slice(&[0, 0]); // reserved
    f.extend_from_slice(&3u32.to_be_bytes()); // ifindex
    f.extend_from_slice(&[0, 1]); // ARPHRD_ETHER
    f.push(4); // outgoing
    f.push(6);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01, 0, 0]);
    f.extend_from_slice(payload);
    f
}

pub struct PcapSpec {
    pub big_endian: bool,
    pub nano: bool,
    pub link_type: u32,
    pub snaplen: u32,
}

/// A classic pcap file: (timestamp ns, captured bytes, original length).
pub fn pcap_file(spec: &PcapSpec, packets: &[(u64, Vec<u8>, u32)]) -> Vec<u8> {
    let w32 = |out: &mut Vec<u8>, v: u32| {
        if spec.big_endian {
            out.extend_from_slice(&v.to_be_bytes())
        } else {
            out.extend_from_slice(&v.to_le_bytes())
        }
    };
    let w16 = |out: &mut Vec<u8>, v: u16| {
        if spec.big_endian {
            out.extend_from_slice(&v.to_be_bytes())
        } else {
            out.extend_from_slice(&v.to_le_bytes())
        }
    };
    let mut out = Vec::new();
    w32(&mut out, if spec.nano { 0xA1B2_3C4D } else { 0xA1B2_C3D4 });
    w16(&mut out, 2);
    w16(&mut out, 4);
    w32(&mut out, 0);
    w32(&mut out, 0);
    w32(&mut out, spec.snaplen);
    w32(&mut out, spec.link_type);
    for (ts, data, orig) in packets {
        w32(&mut out, (ts / 1_000_000_000) as u32);
        let sub = (ts % 1_000_000_000) as u32;
        w32(&mut out, if spec.nano { sub } else { sub / 1000 });
        w32(&mut out, data.len() as u32);
        w32(&mut out, *orig);
        out.extend_from_slice(data);
    }
    out
}

/// Little-endian pcapng block.
pub fn ng_block(block_type: u32, body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    while !body.len().is_multiple_of(4) {
        body.push(0);
    }
    let total = (12 + body.len()) as u32;
    let mut b = Vec::new();
    b.extend_from_slice(&block_type.to_le_bytes());
    b.extend_from_slice(&total.to_le_bytes());
    b.extend_from_slice(&body);
    b.extend_from_slice(&total.to_le_bytes());
    b
}

/// Little-endian pcapng option list (terminated by opt_endofopt).
pub fn ng_options(opts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    if opts.is_empty() {
        return Vec::new();
    }
    let mut o = Vec::new();
    for (code, value) in opts {
        o.extend_from_slice(&code.to_le_bytes());
        o.extend_from_slice(&(value.len() as u16).to_le_bytes());
        o.extend_from_slice(value);
        while !o.len().is_multiple_of(4) {
            o.push(0);
        }
    }
    o.extend_from_slice(&[0, 0, 0, 0]);
    o
}

pub fn ng_shb(options: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&(-1i64).to_le_bytes());
    body.extend_from_slice(&ng_options(options));
    ng_block(0x0A0D_0D0A, &body)
}

pub fn ng_idb(link_type: u16, snaplen: u32, options: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&link_type.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&snaplen.to_le_bytes());
    body.extend_from_slice(&ng_options(options));
    ng_block(1, &body)
}

pub fn ng_epb(
    interface: u32,
    raw_ts: u64,
    data: &[u8],
    orig_len: u32,
    options: &[(u16, Vec<u8>)],
) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&interface.to_le_bytes());
    body.extend_from_slice(&((raw_ts >> 32) as u32).to_le_bytes());
    body.extend_from_slice(&(raw_ts as u32).to_le_bytes());
    body.extend_from_slice(&(data.len() as u32).to_le_bytes());
    body.extend_from_slice(&orig_len.to_le_bytes());
    body.extend_from_slice(data);
    while !body.len().is_multiple_of(4) {
        body.push(0);
    }
    body.extend_from_slice(&ng_options(options));
    ng_block(6, &body)
}

pub fn ng_spb(data: &[u8], orig_len: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&orig_len.to_le_bytes());
    body.extend_from_slice(data);
    ng_block(3, &body)
}

/// Checks every length field and checksum of the UDP datagram in an IP
/// packet starting at `ip` (independently of the crate). Returns the UDP
/// payload.
pub fn verify_ip_udp(ip: &[u8]) -> Vec<u8> {
    match ip[0] >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            assert_eq!(total, ip.len(), "IPv4 total length");
            assert_eq!(inet_sum(&[&ip[..ihl]]), 0, "IPv4 header checksum");
            assert_eq!(ip[9], 17);
            let udp = &ip[ihl..];
            let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
            assert_eq!(udp_len, udp.len(), "UDP length");
            let stored = u16::from_be_bytes([udp[6], udp[7]]);
            if stored != 0 {
                let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
                let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
                let mut zeroed = udp.to_vec();
                zeroed[6..8].copy_from_slice(&[0, 0]);
                assert_eq!(
                    stored,
                    udp_checksum_v4(src, dst, &zeroed),
                    "UDP/IPv4 checksum"
                );
            }
            udp[8..].to_vec()
        }
        6 => {
            let payload_len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            assert_eq!(payload_len + 40, ip.len(), "IPv6 payload length");
            // Walk extension headers (hop-by-hop 0, routing 43, dest opts 60).
            let mut next = ip[6];
            let mut at = 40;
            while next != 17 {
                assert!(matches!(next, 0 | 43 | 60), "unexpected next header {next}");
                next = ip[at];
                at += (usize::from(ip[at + 1]) + 1) * 8;
            }
            let udp = &ip[at..];
            let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
            assert_eq!(udp_len, udp.len(), "UDP length");
            let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap());
            let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap());
            let stored = u16::from_be_bytes([udp[6], udp[7]]);
            assert_ne!(stored, 0, "IPv6 UDP checksum must not be 0");
            let mut zeroed = udp.to_vec();
            zeroed[6..8].copy_from_slice(&[0, 0]);
            assert_eq!(
                stored,
                udp_checksum_v6(src, dst, &zeroed),
                "UDP/IPv6 checksum"
            );
            udp[8..].to_vec()
        }
        v => panic!("not IP: version {v}"),
    }
}
