//! A call's figures in the structure rtpengine's `query` and `delete` replies give them, so the
//! scripts SIP proxies already run against rtpengine (Kamailio's `rtpengine_query()`,
//! `$rtpstat`, CDR scripts reading a `delete` reply) read secrelay's calls the same way:
//!
//! ```text
//! created, created_us, last signal,
//! tags: { TAG: { tag, created, medias: [ { index, type, protocol,
//!           streams: [ { local port, local address, family, endpoint, flags: [RTP],
//!                        stats: { packets, bytes, errors } },
//!                      { … the RTCP stream, flags: [RTCP] } ],
//!           flags } ] } },
//! totals: { RTP: { packets, bytes, errors }, RTCP: { packets, bytes, errors } }
//! ```
//!
//! A stream's `stats` count what the side sent the gateway on it: RTP the media admitted from
//! it (`errors`: what was dropped), RTCP the reports it sent. The RTCP stream of a side that
//! muxes RTCP shares RTP's port. `endpoint` is where the side said it receives.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{SystemTime, UNIX_EPOCH};

use secrelay_wire::bencode::Bencode;
use secrelay_wire::ng::reply;

use super::ng_call::{ReportMember, ReportSection};
use crate::shard::ParticipantSnapshot;

fn text(s: &str) -> Bencode {
    Bencode::str(s)
}

fn int(n: u64) -> Bencode {
    Bencode::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

fn unix(t: SystemTime) -> (u64, u64) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), u64::from(d.subsec_micros()))
}

fn family(ip: IpAddr) -> &'static str {
    match ip {
        IpAddr::V4(_) => "IPv4",
        IpAddr::V6(_) => "IPv6",
    }
}

fn endpoint(a: SocketAddr) -> Bencode {
    reply(vec![
        ("family", text(family(a.ip()))),
        ("address", text(&a.ip().to_string())),
        ("port", int(u64::from(a.port()))),
    ])
}

/// `packets`, `bytes`, `errors`.
#[derive(Debug, Clone, Copy, Default)]
struct Stats {
    packets: u64,
    bytes: u64,
    errors: u64,
}

impl Stats {
    fn add(&mut self, o: Stats) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.errors += o.errors;
    }

    fn bencode(self) -> Bencode {
        reply(vec![
            ("packets", int(self.packets)),
            ("bytes", int(self.bytes)),
            ("errors", int(self.errors)),
        ])
    }
}

/// A side's streams in one section, and what they add to the totals (RTP, RTCP); `bind` is
/// the local address and its family as the report writes them.
fn streams(
    m: &ReportMember,
    bind: &(Bencode, Bencode),
    p: Option<&ParticipantSnapshot>,
) -> (Bencode, Stats, Stats) {
    let rtp = p.map_or_else(Stats::default, |p| Stats {
        packets: p.packets_in,
        bytes: p.bytes_in,
        errors: p.drops.values().sum(),
    });
    let rtcp = Stats {
        packets: p.map_or(0, |p| p.rtcp.reports_received),
        ..Stats::default()
    };
    let stream = |port: u16, kind: &str, stats: Stats, peer: Option<SocketAddr>| {
        let mut e = vec![
            ("local port", int(u64::from(port))),
            ("local address", bind.0.clone()),
            ("family", bind.1.clone()),
        ];
        if let Some(a) = peer {
            e.push(("endpoint", endpoint(a)));
        }
        e.push(("flags", Bencode::List(vec![text(kind), text("filled")])));
        e.push(("stats", stats.bencode()));
        reply(e)
    };
    let rtcp_port = if m.rtcp_mux {
        m.local_port
    } else {
        m.local_port.wrapping_add(1)
    };
    let rtcp_peer = m.endpoint.map(|a| {
        if m.rtcp_mux {
            a
        } else {
            SocketAddr::new(a.ip(), a.port().wrapping_add(1))
        }
    });
    let list = Bencode::List(vec![
        stream(m.local_port, "RTP", rtp, m.endpoint),
        stream(rtcp_port, "RTCP", rtcp, rtcp_peer),
    ]);
    (list, rtp, rtcp)
}

/// The call's report (the `query` reply's entries, and the `delete` reply's): `sections` as
/// the call has them, `snapshots` each member's figures by (room, id), `tags` the tag of side
/// A and of side B (once known), `bind` the address the legs' ports are bound on.
pub(crate) fn report(
    sections: &[ReportSection],
    snapshots: &HashMap<(String, String), ParticipantSnapshot>,
    tags: (&str, Option<&str>),
    times: (SystemTime, SystemTime),
    bind: IpAddr,
) -> Vec<(&'static str, Bencode)> {
    let (created, created_us) = unix(times.0);
    let bind = (text(&bind.to_string()), text(family(bind)));
    let mut totals = (Stats::default(), Stats::default());
    let mut tag_entries: Vec<(Vec<u8>, Bencode)> = Vec::new();
    for (tag, which) in [(Some(tags.0), 0), (tags.1, 1)] {
        let Some(tag) = tag else { continue };
        let mut medias = Vec::new();
        for s in sections {
            let m = if which == 0 { &s.a } else { &s.b };
            let Some(m) = m else { continue };
            let p = snapshots.get(&(m.room.clone(), m.id.clone()));
            let (list, rtp, rtcp) = streams(m, &bind, p);
            totals.0.add(rtp);
            totals.1.add(rtcp);
            medias.push(reply(vec![
                ("index", int(s.index as u64)),
                ("type", text(&s.media)),
                ("protocol", text(&m.protocol)),
                ("streams", list),
                (
                    "flags",
                    Bencode::List(vec![text("initialized"), text("send")]),
                ),
            ]));
        }
        let entry = reply(vec![
            ("tag", text(tag)),
            ("created", int(created)),
            ("medias", Bencode::List(medias)),
        ]);
        tag_entries.push((tag.as_bytes().to_vec(), entry));
    }
    vec![
        ("created", int(created)),
        ("created_us", int(created_us)),
        ("last signal", int(unix(times.1).0)),
        ("tags", Bencode::Dict(tag_entries)),
        (
            "totals",
            reply(vec![
                ("RTP", totals.0.bencode()),
                ("RTCP", totals.1.bencode()),
            ]),
        ),
    ]
}
